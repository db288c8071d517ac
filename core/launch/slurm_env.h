/*
 * Where a Slurm job's rendezvous store lives when nobody exported
 * MASTER_ADDR: rank 0 runs on the first node of the step (srun places task
 * 0 there), so the host is the first name of SLURM_STEP_NODELIST (inside a
 * step) or SLURM_NODELIST (a batch script, before srun), and the port is
 * MASTER_PORT when set, else 20000 + (16 · SLURM_JOB_ID + SLURM_STEP_ID)
 * mod 10000 (SLURM_STEP_ID 0 outside a step): equal on every node of the
 * step without any exchange, and different for jobs and steps that share a
 * node. Pure; thread-safe.
 */
#ifndef PLAIT_CORE_LAUNCH_SLURM_ENV_H
#define PLAIT_CORE_LAUNCH_SLURM_ENV_H

#include <stddef.h>
#include <plait/types.h>

/* The value of `name` in `envp` (an environ-style array), NULL if absent.
 * Shared with the job environment's detection (job_env.c). */
const char *plait_env_lookup(char *const *envp, const char *name);

/* PLAIT_OK with host/port filled, or PLAIT_ERR_INVALID_CONFIG naming the
 * variable when neither node list is set, a list or MASTER_PORT is
 * malformed, or SLURM_JOB_ID is missing. `envp` NULL = the process
 * environment. */
plait_status plait_slurm_store_address(char *const *envp, char *host, size_t cap, int *port);

#endif
