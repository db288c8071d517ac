/*
 * The buffers each rank keeps across steps for its plugins (host/
 * kept_buffers.h: onebit's error feedback) in a run's checkpoints: every
 * rank's, under names that carry the layout and the world rank, in the
 * checkpoint's optimizer file; and back into the same buffers on a resume
 * whose layout is the saving run's. Any other resume starts them at zero,
 * said once by rank 0.
 *
 * Collective over the run's world, like the save and the resume they are
 * part of; not thread-safe.
 */
#ifndef PLAIT_CORE_RUN_KEPT_H
#define PLAIT_CORE_RUN_KEPT_H

#include "checkpoint/checkpoint.h"
#include "train/run.h"

/* What every rank keeps, as rank 0 learns it at a save. */
typedef struct plait_kept_manifest {
    int n;             /* entries (rank 0: every rank's; others: their own) */
    int *rank;         /* the world rank holding entry i */
    size_t *count;     /* its floats */
    char (*name)[96];  /* its name */
    size_t most;       /* the largest count */
} plait_kept_manifest;

/* Collective: each rank's kept buffers, told to rank 0. */
plait_status plait_run_kept_manifest(plait_run *run, plait_kept_manifest *m);
/* Rank 0: declare every entry in the checkpoint's optimizer file. */
plait_status plait_run_kept_declare(const plait_run *run, const plait_kept_manifest *m, plait_ckpt_writer *w);
/* Collective: every rank's buffers to rank 0, which writes them into `w`
 * (NULL: rank 0 receives them and writes nothing, so a writer that failed
 * leaves no sender waiting). */
plait_status plait_run_kept_write(plait_run *run, const plait_kept_manifest *m, plait_ckpt_writer *w);
void plait_run_kept_manifest_free(plait_kept_manifest *m);

/* The tensor name of kept buffer `name` of world rank `rank` under this
 * run's layout (as checkpoints and the replicas in memory store it). */
void plait_run_kept_tensor_name(const plait_run *run, char *buf, size_t cap, int rank, const char *name);

/* Collective, after the plugins' set-up: fill the kept buffers from `src`
 * when it holds every rank's under this layout; else leave them zero and
 * say so once (rank 0), when any rank keeps one. */
plait_status plait_run_kept_restore(plait_run *run, const plait_ckpt_source *src);

#endif
