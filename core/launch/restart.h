/*
 * Automatic restarts (`plait train --max-restarts K`, `[run] max_restarts`),
 * after torchrun's elastic agent: when a rank of a launched job fails, the
 * launcher stops the job as it always does, then starts every rank again
 * with run.resume=auto (the latest complete checkpoint), at most K times.
 * The ranks learn which attempt they are from the environment the launcher
 * gives them, so rank 0 can log the restart and metrics.csv can carry it:
 *
 *   PLAIT_RESTART_COUNT   0 for the first run, then 1, 2, ... (torchrun's
 *                         TORCHELASTIC_RESTART_COUNT)
 *   PLAIT_MAX_RESTARTS    K
 *   PLAIT_RESTART_REASON  the previous attempt's failure ("rank 2 was killed
 *                         by SIGKILL"), absent on the first run
 *
 * Thread-safe (reads the environment only).
 */
#ifndef PLAIT_CORE_LAUNCH_RESTART_H
#define PLAIT_CORE_LAUNCH_RESTART_H

#define PLAIT_RESTART_ENV_MAX 4

/* Launcher side: fill env[0..] with malloc'd "NAME=value" entries for
 * attempt `attempt` (NULL-terminated; at most PLAIT_RESTART_ENV_MAX slots
 * including the NULL); `reason` "" on the first attempt. Out of memory
 * leaves fewer entries (the ranks then see attempt 0). */
void plait_restart_env(int attempt, int max_restarts, const char *reason, char **env);
void plait_restart_env_free(char **env);

/* Rank side: PLAIT_RESTART_COUNT (0 when unset or malformed), and
 * PLAIT_RESTART_REASON ("" when unset). */
int plait_restart_count(void);
int plait_restart_max(void);
const char *plait_restart_reason(void);

#endif
