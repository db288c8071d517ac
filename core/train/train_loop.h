/*
 * The training loop behind `plait train` (and the ranks it spawns).
 *
 * Not thread-safe: the thread that drives the run runs the loop.
 */
#ifndef PLAIT_CORE_TRAIN_LOOP_H
#define PLAIT_CORE_TRAIN_LOOP_H

#include <stddef.h>

#include "config/config.h"

typedef enum {
    PLAIT_RESUME_FROM_CONFIG = 0, /* [run] resume decides */
    PLAIT_RESUME_REQUIRED = 1,    /* --resume: a complete checkpoint must exist */
    PLAIT_RESUME_IF_ANY = 2       /* --eval-only: the latest complete checkpoint where there is one, whatever
                                     [run] resume says */
} plait_resume_mode;

typedef struct plait_train_options {
    plait_resume_mode resume;
    const char *progress;   /* override of [run] progress, or NULL */
    int *regrouped;         /* NULL, or set to 1 when an elastic job's ranks stopped at a boundary so that a
                               waiting host can join (the command then exits PLAIT_RESTART_REGROUP_EXIT) */
    int eval_only;          /* --eval-only: the validation loss of the state the run starts from (its
                               checkpoint, [run] init_from or the initialisation), once; nothing trained or
                               saved (Megatron-LM's --skip-train) */
} plait_train_options;

/* Train as this rank of the job (collective over the world). */
plait_status plait_train(plait_config *cfg, const plait_train_options *opts);

/* The run directory: [run] out_dir, or runs/<config file name without .ini>. */
void plait_train_out_dir(const plait_config *cfg, char *buf, size_t len);

/* The files a rank reads at its start that name nothing: [data]'s
 * (plait_data_check_files), and [run] init_from where the run is sure to
 * start fresh (the job's first start, whose run directory does not exist
 * yet; where it exists, a checkpoint in it may be resumed instead, which
 * the run decides once open). The ranks check them before they make the
 * run directory, so that a mistyped path leaves none behind; the launcher
 * of local ranks once, before it starts them. */
plait_status plait_train_check_inputs(const plait_config *cfg);

/* [run] trace within [run] steps, which count a resumed run's steps too
 * (a range before a resumed run's first step is the run's to refuse, once
 * it knows that step): checked by the ranks before their run directory
 * and by the launcher of local ranks once, before it starts them. The
 * rules between the core's keys check only its form, since plait bench
 * train traces its own steps. */
plait_status plait_train_check_trace(const plait_config *cfg);

#endif
