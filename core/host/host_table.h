/*
 * The host API table (sdk/include/plait/host.h): the outward-facing adapter
 * through which plugins reach the core. It is built once from the core's own
 * functions (logging, errors, memory, configuration, the clock, the
 * collectives of core/comm, the kernels and parameter initialisation of
 * core/model, the plugin loader) and handed to the loader, which passes it
 * to every plugin's entry and init functions. Inside the core, modules call
 * each other directly and never through this table.
 *
 * This module sits above every module it names (it is the only file that
 * sees them all); nothing in the core below core/cli includes it.
 */
#ifndef PLAIT_CORE_HOST_TABLE_H
#define PLAIT_CORE_HOST_TABLE_H

#include <plait/host.h>

#include "model/model.h"

/* The table. Built on first use (thread-safe), immutable, lives until exit. */
const plait_host *plait_host_table(void);

/* Hand the table to the plugin loader (plugin/loader.h), which refuses to
 * load plugins before. Call once at start-up (the CLI's main, a test's
 * setup) before any plugin is loaded; idempotent; not thread-safe with
 * plugin loading. */
void plait_host_install(void);

/* After plait_device_open (device/device.h) and before any plugin object
 * is created: host->device, host->device_info and host->kernels become the
 * open device's (and the core's CPU kernels again, device NULL, after
 * plait_device_close). Not thread-safe with plugins using the table. */
void plait_host_attach_device(void);

/* The open run's initial-value rule ([run] seed, its model's n_layer):
 * what host->init_values computes from, until the next call (before one,
 * seed 1337 and one layer). Not thread-safe with plugins using the table. */
void plait_host_attach_init_rule(const plait_init_rule *rule);

/* Unload every plugin (plait_plugins_unload_all). Call at exit, after every
 * plugin object was destroyed. */
void plait_host_uninstall(void);

#endif
