/*
 * One run per out_dir: the process that writes a run's metrics and
 * checkpoints (world rank 0) holds an exclusive flock on <out_dir>/.lock for
 * the run's life, so a second run started in the same directory is refused
 * at once instead of racing the first one's checkpoints and metrics.csv.
 * The file names its holder (pid, host, start time) for the refusal, and
 * its job (launch/bootstrap.h: plait_job_env_identity); the kernel drops
 * the lock when the holder exits however it exits, so a stale file never
 * blocks a later run.
 *
 * The job's other ranks write there too (their logs), from before they
 * join it, so that a failure while the run is built is logged. Each looks
 * at the lock first: a directory another run holds is refused by every
 * rank without a file of its own written there.
 */
#ifndef PLAIT_CORE_TRAIN_OUT_DIR_LOCK_H
#define PLAIT_CORE_TRAIN_OUT_DIR_LOCK_H

#include <plait/types.h>

#define PLAIT_OUT_DIR_LOCK_FILE ".lock"

/* Lock `out_dir` (which exists) for the job named `job` ("" or NULL: a
 * single process). On success *fd holds the lock until
 * plait_out_dir_unlock(*fd) or process exit. If another process holds it:
 * PLAIT_ERR_INVALID_CONFIG naming the directory and the holder. Other
 * failures: PLAIT_ERR_SYSTEM. Thread-safe. */
plait_status plait_out_dir_lock(const char *out_dir, const char *job, int *fd);
/* May a rank of `job` other than the lock's taker write in `out_dir`? Yes
 * (PLAIT_OK) when no process holds its lock (no lock file, a stale one, or
 * the job's rank 0 yet to take it) or the holder is `job`'s. When another
 * run holds it: the refusal plait_out_dir_lock gives. The job's rank 0 may
 * hold the lock a moment before its file names the job, so a holder under
 * another name is looked at again for up to `wait_s` seconds before the
 * refusal. Reads only: creates and changes nothing in `out_dir`. */
plait_status plait_out_dir_enter(const char *out_dir, const char *job, double wait_s);
/* Is the run still in `out_dir`? PLAIT_OK while <out_dir>/.lock is the file
 * `fd` locked; PLAIT_ERR_SYSTEM naming the directory when it was removed or
 * replaced (rm -rf, mv) under the run, whose metrics, logs and lock went
 * with it. fd < 0 (not the holder): PLAIT_OK. One fstat and one lstat. */
plait_status plait_out_dir_check(const char *out_dir, int fd);
/* Release (fd < 0: nothing). */
void plait_out_dir_unlock(int fd);

#endif
