/*
 * A run's end: closed, every part by the file that set it up, or failed,
 * its peers told why first (run.h). Below the set-up, which ends a rank
 * whose set-up failed here too.
 */
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "train/run.h"
#include "train/run_internal.h"
#include "runtime/trace.h"
#include "train/run_replica.h"
#include "train/run_trace.h"

void plait_run_close(plait_run *run) {
    if (!run) return;
    plait_run_data_close(run);
    if (run->optim.ops && run->optim.state) run->optim.ops->destroy(run->optim.state);
    if (run->parallel.ops && run->parallel.state) run->parallel.ops->destroy(run->parallel.state);
    plait_model_free(run->model.instance);
    plait_run_free_params(run);
    free(run->work.plan.shards);
    free(run->work.plan.second_shards);
    free(run->work.plan.layer_stage);
    free(run->work.plan.layer_chunk);
    free(run->work.plan.schedule);
    free(run->work.first_layer);
    free(run->work.last_layer);
    plait_step_exec_close(&run->exec);
    plait_stage_timing_close(&run->timing);
    plait_run_moe_free(&run->moe);
    plait_model_desc_free(run->model.desc);
    if (run->world.comm) plait_mesh_release(&run->world.mesh);
    plait_run_replica_close(run);
    plait_run_close_world(run);
    plait_trace_close(); /* [run] trace's buffer, once no communicator's thread records */
    plait_process_state_free(&run->process);
    free(run);
}

plait_status plait_run_fail(plait_run *run, plait_status st, const char *at, const char *what) {
    char msg[2048];
    snprintf(msg, sizeof msg, "%s", plait_last_error());
    /* memory, said as memory, with what needs less */
    if (st == PLAIT_ERR_NO_MEMORY && strlen(msg) + 200 < sizeof msg)
        strcat(msg, " (`plait config check` predicts each rank's memory and names what fits: a smaller "
                    "data.micro_batch, model.recompute, a ZeRO stage)");
    run->world.failed = 1;
    plait_run_trace_flush(); /* what this rank recorded up to the failure */
    int me = run->world.mesh.world_rank;
    char why[2200];
    snprintf(why, sizeof why, "rank %d stopped: %s", me, msg);
    if (run->world.comm) plait_comm_fail(run->world.comm, st, why);
    plait_run_close(run);
    /* A rank that stops because another one failed says so in one short
     * line pointing to that rank, whose own error names the failure in
     * full (the chain stays in this rank's log). */
    int origin;
    if (plait_error_relayed(msg, &origin)) {
        plait_log_file_only(PLAIT_LOG_ERROR, what, "%s", msg);
        if (origin >= 0)
            return plait_set_error(st,
                                   "%s: world rank %d stopped after world rank %d failed (its error names the cause)",
                                   at, me, origin);
        return plait_set_error(st, "%s: world rank %d stopped after another rank failed (its error names the cause)",
                               at, me);
    }
    return plait_set_error(st, "%s", msg);
}
