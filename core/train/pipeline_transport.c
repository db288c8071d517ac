/* Which pipelines a comm plugin can carry (train/pipeline_transport.h). */
#include "train/pipeline_transport.h"

#include <plait/comm.h>

#include "plugin/loader.h"
#include "runtime/error.h"

plait_status plait_check_pipeline_transport(const plait_config *cfg, int pp, int chunks) {
    if (pp < 2 || chunks < 2) return PLAIT_OK;
    const char *comm = plait_config_str(cfg, "comm", "plugin");
    const plait_plugin_desc *d = plait_plugin_load(PLAIT_KIND_COMM, comm);
    if (!d) { /* the run names the plugin it cannot load */
        plait_clear_error();
        return PLAIT_OK;
    }
    if (!(((const plait_comm_ops *)d->ops)->flags & PLAIT_COMM_CUDA_STREAMS)) return PLAIT_OK;
    const char *where = NULL;
    plait_config_origin(cfg, "parallel.pp", "virtual_stages", &where);
    return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                           "%s: [parallel.pp] virtual_stages = %d over [comm] plugin = %s: a pipeline of several "
                           "model chunks a stage posts its sends and receives in an order that a transport batching "
                           "them on one stream cannot complete (rule [grouping] of plait/comm.h; docs/transport.md, "
                           "\"Posting order\"), so its ranks would wait on each other until [comm] timeout; use "
                           "virtual_stages = 1 (schedule 1f1b, zb1 or gpipe) or [comm] plugin = tcp",
                           where ? where : "config", chunks, comm);
}
