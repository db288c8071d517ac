/*
 * Whether every rank of a run sees the one run directory: a sharded save
 * ([run] ckpt_format = sharded) has each rank write its shard file into
 * <out_dir>/ckpt-<step>/ and world rank 0 index them, so the ranks must
 * share the directory's file system (NFS, Lustre, GPFS...), as
 * Megatron-Core's and torchtitan's distributed checkpoints require. Ranks
 * on hosts with local disks each see a directory of their own; this check
 * finds them before the first step, rather than at the first save after
 * hours of training.
 */
#ifndef PLAIT_CORE_TRAIN_RUN_SHARED_DIR_H
#define PLAIT_CORE_TRAIN_RUN_SHARED_DIR_H

#include "train/run.h"

/* Collective over the run's world (every rank calls it, whatever its own
 * files did): each rank writes a marker file
 * <out_dir>/.plait-shared-<token>-<world rank> (the token rank 0's random
 * number), then each looks for rank 0's marker and rank 0 for every
 * rank's; the markers are removed. PLAIT_OK when every rank saw rank 0's
 * and rank 0 saw every rank's, or the world has one rank; else
 * PLAIT_ERR_INVALID_CONFIG on every rank, naming the ranks that do not
 * share it, rank 0's out_dir and what to do. A failed collective: its
 * error. Not thread-safe (the run's thread). */
plait_status plait_run_check_shared_dir(plait_run *run, const char *out_dir);

#endif
