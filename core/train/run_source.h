/*
 * Where a run's initial values come from: the layout-independent
 * initialisation of a fresh run, or a checkpoint (any layout's). Either way a
 * plait_value_source that the core uses for its own parameter storage and
 * passes to the optimizer's materialize().
 */
#ifndef PLAIT_CORE_RUN_SOURCE_H
#define PLAIT_CORE_RUN_SOURCE_H

#include "train/checkpoint.h"
#include "train/run.h"

typedef struct plait_run_source {
    plait_value_source source;  /* what plugins get */
    plait_run *run;
    plait_ckpt *ck;             /* NULL for a fresh run */
    plait_ckpt_source cks;
} plait_run_source;

/* resume_dir NULL: fresh values. Else open and verify that checkpoint. */
plait_status plait_run_source_open(plait_run *run, const char *resume_dir, plait_run_source *src);
/* Fill the core-owned parameter storage from the source. */
plait_status plait_run_source_fill_params(plait_run *run, plait_run_source *src);
/* Restore the run state (step, optimizer step) after a checkpoint load. */
plait_status plait_run_source_restore_state(plait_run *run, plait_run_source *src);
void plait_run_source_close(plait_run_source *src);

#endif
