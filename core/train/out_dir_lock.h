/*
 * One run per out_dir: the process that writes a run's metrics and
 * checkpoints (world rank 0) holds an exclusive flock on <out_dir>/.lock for
 * the run's life, so a second run started in the same directory is refused
 * at once instead of racing the first one's checkpoints and metrics.csv.
 * The file names its holder (pid, host, start time) for the refusal; the
 * kernel drops the lock when the holder exits however it exits, so a stale
 * file never blocks a later run.
 */
#ifndef PLAIT_CORE_TRAIN_OUT_DIR_LOCK_H
#define PLAIT_CORE_TRAIN_OUT_DIR_LOCK_H

#include <plait/types.h>

#define PLAIT_OUT_DIR_LOCK_FILE ".lock"

/* Lock `out_dir` (which exists). On success *fd holds the lock until
 * plait_out_dir_unlock(*fd) or process exit. If another process holds it:
 * PLAIT_ERR_INVALID_CONFIG naming the directory and the holder. Other
 * failures: PLAIT_ERR_SYSTEM. Thread-safe. */
plait_status plait_out_dir_lock(const char *out_dir, int *fd);
/* Is the run still in `out_dir`? PLAIT_OK while <out_dir>/.lock is the file
 * `fd` locked; PLAIT_ERR_SYSTEM naming the directory when it was removed or
 * replaced (rm -rf, mv) under the run, whose metrics, logs and lock went
 * with it. fd < 0 (not the holder): PLAIT_OK. One fstat and one lstat. */
plait_status plait_out_dir_check(const char *out_dir, int fd);
/* Release (fd < 0: nothing). */
void plait_out_dir_unlock(int fd);

#endif
