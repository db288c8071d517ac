/*
 * Process-wide start-up and shutdown: installs the modules behind the host
 * API (collectives, kernels, parameter init) into the host table before any
 * plugin is loaded, and unloads plugins at exit.
 */
#ifndef PLAIT_CORE_RUNTIME_H
#define PLAIT_CORE_RUNTIME_H

/* Idempotent; not thread-safe (call from main before starting threads). */
void plait_runtime_init(void);
void plait_runtime_shutdown(void);

#endif
