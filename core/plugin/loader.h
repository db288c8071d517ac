/*
 * Plugin loader: finds libplait-<kind>-<name>.so files, loads them with
 * dlopen(RTLD_NOW | RTLD_LOCAL), checks them before calling anything in
 * them, and keeps them loaded until plait_plugins_unload_all() at exit
 * (handles are shared per file and never closed early).
 *
 * Search order for a name: the plugin directory next to libplait
 * (build/lib/plait in the build tree, <prefix>/lib/plait when installed),
 * the install prefix's lib/plait, then each directory of PLAIT_PLUGIN_PATH
 * (colon-separated). The first directory holding the file wins; a name given
 * with a '/' is used exactly as written. Thread-safe (one global lock).
 * A file that crashes while it is loaded (SIGSEGV in a constructor, say)
 * still ends the process, but first names the file on stderr. 
 */
#ifndef PLAIT_CORE_LOADER_H
#define PLAIT_CORE_LOADER_H

#include <stddef.h>
#include <plait/host.h>
#include <plait/plugin.h>

#include "runtime/process_state.h"

/* Size of a v1.0 descriptor: anything smaller is refused. */
#define PLAIT_DESC_V1_0_SIZE (offsetof(plait_plugin_desc, uses) + sizeof(const char *const *))

/* The host table handed to every plugin (host/host_table.h installs it at
 * start-up; tests may install their own). Not thread-safe with loading:
 * set before the first plugin is loaded. The table must outlive every
 * plugin. Until one is set, plait_plugin_load fails (PLAIT_ERR_INTERNAL). */
void plait_loader_set_host(const plait_host *host);
/* The table plugins were handed, for the init arguments the core passes to
 * plugin objects (comm, parallel, optim); NULL before plait_loader_set_host. */
const plait_host *plait_plugin_host(void);

/* Load (once) and return the plugin `name` (or a path) of `kind`. On error
 * returns NULL with a message that names the file and what to do; when the
 * file is not found, the message lists every directory searched. An unknown
 * `kind` is PLAIT_ERR_INVALID_ARG. */
const plait_plugin_desc *plait_plugin_load(uint32_t kind, const char *name);
/* plait_plugin_load, then its probe (plait_plugin_probe): a plugin that
 * says it cannot run on this machine is not selected (NULL, with its
 * reason: "the optim plugin x cannot run here: no widget found"), as
 * plugin.h promises. For the kinds selected by name (parallel, optim); a
 * planner weighing another cluster loads without probing. */
const plait_plugin_desc *plait_plugin_load_usable(uint32_t kind, const char *name);
/* The kind named `name` ("comm", "parallel", "optim"), or 0. */
uint32_t plait_kind_parse(const char *name);

/* The path the loaded plugin came from, or NULL. */
const char *plait_plugin_path(const plait_plugin_desc *desc);
/* How long loading and probing a plugin file in a child, or its report,
 * may take before it is named as hung and stopped:
 * PLAIT_PLUGIN_SCAN_TIMEOUT seconds, 30 by default. */
double plait_plugin_scan_seconds(void);
/* desc->probe (PLAIT_OK when it has none), in a thread of its own and
 * bounded by plait_plugin_scan_seconds (runtime/bounded_call.h): its own
 * answer and message, or PLAIT_ERR_TIMEOUT naming the plugin and its file
 * when it did not return (it is left running). The entry function of a
 * file is bounded so by every load. */
plait_status plait_plugin_probe(const plait_plugin_desc *desc);
/* The name of the loaded plugin of `kind` whose ops table is `ops`, or
 * NULL (not a loaded plugin's, or the loader is busy: this never waits for
 * its lock, so a thread reporting a stuck plugin call cannot block on it). */
const char *plait_plugin_name_of_ops(uint32_t kind, const void *ops);
/* One setup call into a plugin (comm init/derive/destroy, device open,
 * parallel/optim create), bracketed by the two functions below: an exit
 * during it names it (runtime/exit_guard.h), and a change it makes to the
 * process's working directory or PLAIT_* variables is refused
 * (runtime/process_state.h). The caller's, on its stack. */
typedef struct plait_plugin_call {
    uint32_t kind;
    const void *ops;
    const char *fn; /* static text: "init" */
    plait_process_state before;
    uint64_t sets; /* plait_error_sets() on entry */
} plait_plugin_call;
/* The calling thread enters the function `fn` of the plugin of `kind`
 * whose table is `ops`. */
void plait_plugin_call_enter(plait_plugin_call *call, uint32_t kind, const void *ops, const char *fn);
/* It has returned `st`: `st`, or PLAIT_ERR_ABI with the error set when the
 * call changed the working directory or a PLAIT_* variable (the message
 * names the plugin, the call and each change; a plugin's own failure
 * message, if any, follows). */
plait_status plait_plugin_call_leave(plait_plugin_call *call, plait_status st);
/* The status `st` that function `fn` of the plugin of `kind` whose table is
 * `ops` returned, with a message naming the plugin and the function where
 * it failed without calling host->set_error (plait/types.h: a failing call
 * has set one) since `sets` (plait_error_sets() before the call): else the
 * caller would pass on whatever message an earlier call left behind. */
plait_status plait_plugin_said(uint32_t kind, const void *ops, const char *fn, uint64_t sets, plait_status st);

/* Directories searched, in order (owned by the loader). */
size_t plait_plugin_dirs(const char *const **dirs);

/* One row of `plait plugins`. */
typedef struct plait_plugin_row {
    char kind[16];
    char name[64];
    char version[32];
    char abi[16];        /* "1.0" */
    char path[1024];
    int loaded;          /* 1 = passed every check */
    int available;       /* probe() said usable here */
    char status[1024];   /* why refused or unavailable; "" when fine */
} plait_plugin_row;

/* Scan every search directory for libplait-*.so files, load and probe each
 * in a child process (a file that crashes, exits or hangs there is one
 * refused row naming what happened; PLAIT_PLUGIN_SCAN_TIMEOUT bounds each
 * file, default 30 s) and fill one row per plugin (or per refused file).
 * Nothing is loaded in the caller. Caller frees *rows. */
size_t plait_plugins_scan(plait_plugin_row **rows);

/* The same for one file, libplait-<kind>-<name>.so at `path` (0 rows when
 * its name is not of that form): whether it loads and probes without
 * crashing, exiting or hanging the caller. Caller frees *rows. */
size_t plait_plugin_scan_file(const char *path, plait_plugin_row **rows);

/* dlclose every file; only at process exit. */
void plait_plugins_unload_all(void);

#endif
