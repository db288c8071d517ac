#include "train/preflight.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"
#include "train/precision.h"
#include "train/run.h"
#include "train/run_internal.h"

/* Release what plait_run_load_parallel built for one rank. */
static void release_plan(plait_run *run) {
    if (run->par && run->par_state) run->par->destroy(run->par_state);
    run->par_state = NULL;
    free(run->plan.shards);
    free(run->plan.layer_stage);
    free(run->plan.layer_chunk);
    free(run->plan.schedule);
    memset(&run->plan, 0, sizeof run->plan);
}

plait_status plait_layout_preflight(plait_config *cfg) {
    int sizes[3], axes[3], c[3];
    plait_status st = plait_mesh_layout(cfg, sizes, axes);
    int precision;
    if (st == PLAIT_OK) st = plait_precision_from_config(cfg, &precision);
    if (st != PLAIT_OK) return st;
    const char *order = plait_config_str(cfg, "parallel", "order");

    plait_run run;
    memset(&run, 0, sizeof run);
    run.cfg = cfg;
    run.deterministic = plait_config_bool(cfg, "run", "deterministic");
    run.block_size = (int32_t)plait_config_int(cfg, "model", "block_size");
    st = plait_batch_from_config(cfg, &run.batch);
    if (st == PLAIT_OK) st = plait_model_describe(cfg, (int32_t)run.batch.micro_batch, &run.desc);
    if (st != PLAIT_OK) return st;
    run.spec = plait_model_desc_spec(run.desc);

    int world = sizes[0] * sizes[1] * sizes[2];
    for (int r = 0; st == PLAIT_OK && r < world; r++) {
        plait_mesh_coords(r, sizes, axes, c);
        run.mesh = (plait_mesh){.struct_size = sizeof run.mesh,
                                .dp = sizes[PLAIT_AXIS_DP], .tp = sizes[PLAIT_AXIS_TP], .pp = sizes[PLAIT_AXIS_PP],
                                .dp_rank = c[PLAIT_AXIS_DP], .tp_rank = c[PLAIT_AXIS_TP],
                                .pp_rank = c[PLAIT_AXIS_PP], .world_rank = r, .world_size = world,
                                .order = order};
        st = plait_run_load_parallel(&run);
        release_plan(&run);
        /* one rank's failure is the layout's unless the others plan fine */
        if (st != PLAIT_OK && r > 0)
            st = plait_wrap_error(st, "rank %d (dp %d, tp %d, pp %d) of the layout", r, c[PLAIT_AXIS_DP],
                                  c[PLAIT_AXIS_TP], c[PLAIT_AXIS_PP]);
    }
    plait_model_desc_free(run.desc);
    return st;
}
