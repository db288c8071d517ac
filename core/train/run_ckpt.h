/*
 * Checkpoints of a run: tensors with global (nanoGPT) names, full or as the
 * ranks' slices with an index ([run] ckpt_format),
 * gathered from whatever layout wrote them and scattered into whatever layout
 * reads them; optimizer state under the Adam family's shared names; the run
 * state (step, seed, data position) beside them. Plus the run's reports.
 *
 * Not thread-safe: one thread drives a run (train/run.h); saving and
 * loading are collective over the run's world.
 */
#ifndef PLAIT_CORE_RUN_CKPT_H
#define PLAIT_CORE_RUN_CKPT_H

#include "checkpoint/checkpoint.h"
#include "train/metrics.h"
#include "train/run.h"
#include "train/train_loop.h"

/* Decide where to resume from: by `mode` and [run] resume, the latest
 * complete checkpoint under out_dir (incomplete or corrupt ones skipped with
 * a warning). *dir = NULL for a fresh run; else a malloc'd path. */
plait_status plait_run_find_resume(const plait_config *cfg, const char *out_dir, plait_resume_mode mode,
                                   char **dir);

/* The newest checkpoint under out_dir that looks complete (marker,
 * state.json and file sizes: plait_ckpt_check_quick; no tensor is read):
 * *dir malloc'd and *step, or NULL and -1. For an elastic restart that may
 * not read the disk at all (train/run_replica.h). */
plait_status plait_run_find_resume_quick(const char *out_dir, char **dir, int64_t *step);

/* Rank 0, before the first step: PLAIT_OK unless out_dir holds, under the
 * name of a checkpoint this run will save (ckpt-<step> for a step in
 * (from_step, steps] that is a multiple of `every` (0: none) or the last),
 * something that is not a directory (a symbolic link, a file, a FIFO), or
 * a directory that holds a directory by a checkpoint file's name
 * (plait_ckpt_check_replaceable): the save would refuse it only after
 * training to that step, so the run is refused now, naming it
 * (PLAIT_ERR_INVALID_ARG). */
plait_status plait_run_check_ckpt_names(const char *out_dir, int64_t from_step, int64_t steps, int64_t every);

/* Bytes one checkpoint of `run` takes on disk: every stored parameter (its
 * global shape) and each of the optimizer's states, float32 (the headers
 * not counted). */
uint64_t plait_run_ckpt_bytes(const plait_run *run);

/* Rank 0, before the first step: when this run will save a checkpoint and
 * out_dir's file system has less room than one takes (statvfs: the blocks
 * an unprivileged writer may use), a warning naming both and the first save
 * that would fail. Only a warning: room can be made while the run trains,
 * and a save that still finds the disk full ends every rank at once
 * naming the file, the earlier checkpoints kept. */
void plait_run_warn_ckpt_room(const plait_run *run, const char *out_dir, int64_t every);

/* Write a checkpoint of the current state (collective over the world). */
plait_status plait_run_save(plait_run *run, const char *out_dir);
/* With [run] ckpt_async: finish a save still being written in the
 * background. `wait` 0: only when every rank's file is written (one
 * all-reduce; called after each step); 1: wait for it, saying so. A failed
 * background write is reported here, naming the rank and the file; the
 * previous checkpoint is kept. Collective over the world. `ok` 0 (the run
 * is failing): wait for this rank's writer and give the save up, with no
 * collective. */
plait_status plait_run_save_settle(plait_run *run, int wait, int ok);

/* The tensors of a sharded save (run_ckpt_shard.c). begin: this rank's
 * parts planned and, synchronously, its shard file written into the
 * checkpoint directory rank 0 began; with `async` its share copied to host
 * memory instead and written by a thread of its own (*job is set even on
 * failure). written: the file is done (thread-safe, never blocks). end,
 * collective over the world: the writer joined, every rank's slices told to
 * rank 0, which writes index.json into `w` (NULL elsewhere) and lists the
 * files in its manifest; frees job. *others_failed (rank 0): another rank's
 * shard failed, so `w` must not be committed. drop: join and free, no
 * collective (a run that is failing). */
typedef struct plait_shard_job plait_shard_job;
plait_status plait_run_shards_begin(plait_run *run, const char *out_dir, int async, plait_shard_job **job);
int plait_run_shards_written(const plait_shard_job *job);
plait_status plait_run_shards_end(plait_run *run, plait_shard_job *job, plait_ckpt_writer *w, int *others_failed);
void plait_run_shards_drop(plait_shard_job *job);

/* Rank 0: the start-up summary (layout, batch, model size, memory report). */
void plait_run_print_summary(plait_run *run, const char *out_dir, const char *resumed_from);
/* Memory per rank, one row of PLAIT_RUN_MEM_FIELDS per world rank:
 * dp, tp, pp coordinates, then bytes of parameters, gradients, optimizer
 * state, buffers, activations, the peak RSS, and the bytes the rank sent
 * per axis in its last step (dp, tp, pp: metrics.csv's counts, which rank 0
 * alone writes), then the cp and ep coordinates (last, so that readers of
 * the first columns by position keep working). Collective over the world
 * (every rank gets every row). rows: world_size * PLAIT_RUN_MEM_FIELDS. */
#define PLAIT_RUN_MEM_FIELDS 14
plait_status plait_run_gather_memory(plait_run *run, double *rows);
/* Rank 0: the per-rank memory table (when the world has > 1 rank). */
void plait_run_print_memory_table(const plait_run *run, const double *rows);
/* Rank 0: write rows as `path` (memory.csv: rank, dp, tp, pp, *_bytes). */
plait_status plait_run_write_memory_csv(const plait_run *run, const double *rows, const char *path);
/* Rank 0: the measured pipeline idle share beside the schedule's formula,
 * averaged over the run's steps after its first (nothing when pp = 1). */
void plait_run_print_bubble(const plait_run *run);

/* Rank 0: one metrics row's values. */
void plait_run_fill_metrics(plait_run *run, plait_metrics *m, const plait_step_result *res, double val_loss);

#endif
