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
 *   PLAIT_RESTART_NEW_DIR 1 when the run directory held no checkpoint
 *                         directory before the first attempt: every
 *                         checkpoint there is this job's, so a restart that
 *                         finds them all incomplete (a crash during the
 *                         job's first save) starts over from step 0 instead
 *                         of refusing (nothing complete exists to lose)
 *   PLAIT_ELASTIC_HOSTS   an elastic job (--nnodes MIN:MAX): the hosts of
 *                         this attempt (absent otherwise)
 *   PLAIT_ELASTIC_CHANGES its membership changes before this attempt
 *
 * Thread-safe (reads the environment only).
 */
#ifndef PLAIT_CORE_LAUNCH_RESTART_H
#define PLAIT_CORE_LAUNCH_RESTART_H

#define PLAIT_RESTART_ENV_MAX 7

/* The exit status of a rank of an elastic job that stopped at a boundary
 * (its checkpoint saved) so that a waiting host can join: not a failure
 * (EX_TEMPFAIL). */
#define PLAIT_RESTART_REGROUP_EXIT 75

/* The exit status of a rank under plait's launcher whose failure no restart
 * can mend (EX_CONFIG): a configuration refused (PLAIT_ERR_INVALID_CONFIG:
 * the same config would be refused again), the run directory in use by
 * another run or removed under this one (plait_error_is_final). A launcher
 * with --max-restarts ends the job instead of restarting it, and exits 1. */
#define PLAIT_RESTART_FINAL_EXIT 78

/* A failed rank's exit status: PLAIT_RESTART_FINAL_EXIT for a failure of
 * `status` no restart can mend, when plait's launcher started this rank
 * (PLAIT_REPORT_FD), else 1. */
int plait_restart_failure_exit(int status);

/* What a launcher tells the ranks of one attempt. */
typedef struct plait_restart_facts {
    int attempt;        /* 0 for the first run */
    int max_restarts;
    const char *reason; /* "" (or NULL) on the first attempt */
    int new_dir;        /* the run directory held no checkpoint before the first attempt */
    int hosts;          /* elastic: hosts of this attempt; 0 = not elastic */
    int changes;        /* elastic: membership changes before it */
} plait_restart_facts;

/* Launcher side: fill env[0..] with malloc'd "NAME=value" entries
 * (NULL-terminated; at most PLAIT_RESTART_ENV_MAX slots including the
 * NULL). Out of memory leaves fewer entries (the ranks then see attempt 0). */
void plait_restart_env(const plait_restart_facts *f, char **env);
void plait_restart_env_free(char **env);

/* Rank side: PLAIT_RESTART_COUNT (0 when unset or malformed),
 * PLAIT_RESTART_REASON ("" when unset), PLAIT_RESTART_NEW_DIR (0 unless 1). */
int plait_restart_count(void);
int plait_restart_max(void);
const char *plait_restart_reason(void);
int plait_restart_new_dir(void);
/* PLAIT_ELASTIC_HOSTS (0 when not elastic) and PLAIT_ELASTIC_CHANGES. */
int plait_restart_hosts(void);
int plait_restart_changes(void);

#endif
