/*
 * A run's job and world communicator: join the job (whatever launched this
 * rank), create the world over the selected comm plugin, set the math threads,
 * and check that every rank uses the same values for the keys that must agree.
 */
#include <stdlib.h>
#include <string.h>

#include "commstate/comm_device.h"
#include "comm/comm_job.h"
#include "device/device.h"
#include "host/host_table.h"
#include "kernels/kernels.h"
#include "layout/mesh_map.h"
#include "plugin/loader.h"
#include "comm/comm.h"
#include "runtime/error.h"
#include "runtime/memory.h"
#include "runtime/log.h"
#include "train/precision.h"
#include "train/run.h"
#include "train/run_internal.h"

/* Rank 0's fingerprint of the must-agree keys goes to everyone; a rank that
 * differs names its differing lines, and every rank fails together. */
static plait_status check_same_config(plait_run *run) {
    char *mine = plait_config_fingerprint(run->cfg);
    if (!mine) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    int64_t len = (int64_t)strlen(mine) + 1;
    plait_status st = plait_comm_broadcast(run->world.comm, &len, 1, PLAIT_I64, 0, NULL, NULL);
    char *root = st == PLAIT_OK ? malloc((size_t)len) : NULL;
    if (st == PLAIT_OK && !root) st = plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    if (st == PLAIT_OK) {
        if (plait_comm_rank(run->world.comm) == 0) memcpy(root, mine, (size_t)len);
        st = plait_comm_broadcast(run->world.comm, root, (size_t)len, PLAIT_U8, 0, NULL, NULL);
    }
    char diff[1024] = "";
    int differs = st == PLAIT_OK && plait_config_fingerprint_diff(mine, root, "rank 0", diff, sizeof diff);
    /* the lowest differing rank's difference, said by every rank (rank 0's
     * host included, where the job's store and its user are) */
    int32_t first = differs ? (int32_t)plait_comm_rank(run->world.comm) : INT32_MAX;
    if (st == PLAIT_OK) st = plait_comm_allreduce(run->world.comm, &first, &first, 1, PLAIT_I32, PLAIT_MIN, NULL, NULL);
    if (st == PLAIT_OK && first != INT32_MAX)
        st = plait_comm_broadcast(run->world.comm, diff, sizeof diff, PLAIT_U8, first, NULL, NULL);
    free(root);
    free(mine);
    if (st != PLAIT_OK) return st;
    if (first != INT32_MAX) {
        diff[sizeof diff - 1] = '\0';
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "rank %d's configuration differs from rank 0's in a key that must be equal on every "
                               "rank: %s",
                               (int)first, diff);
    }
    return PLAIT_OK;
}

/* The mesh on the node, said once at start-up by rank 0 where another
 * launcher (mpirun, srun, torchrun) started the ranks: plait's own prints
 * it before starting them (cli/cli_launch.c). From the job's hosts as they
 * joined, each taken to be like rank 0's. */
static void log_mesh_map(const plait_run *run) {
    plait_job *job = run->world.job;
    const plait_bind_result *b = plait_job_bind_result(job);
    int sizes[PLAIT_MESH_AXES], axes[PLAIT_MESH_AXES];
    if (plait_job_rank(job) != 0 || plait_job_launcher_kind(job) == PLAIT_LAUNCHER_PLAIT || !b->topo ||
        plait_job_size(job) > 4096 || plait_mesh_shape(run->cfg, sizes, axes) != PLAIT_OK ||
        plait_mesh_world_size(run->cfg) != plait_job_size(job)) {
        plait_clear_error();
        return;
    }
    char text[2048];
    plait_mesh_map_node_text(sizes, axes, b->topo, b->places, plait_job_local_size(job), plait_job_host_of(job), text,
                             sizeof text);
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) PLAIT_INFO("bind", "%s", line);
}

plait_status plait_run_open_world(plait_run *run) {
    const char *name = plait_config_str(run->cfg, "comm", "plugin");
    const plait_plugin_desc *d = plait_plugin_load(PLAIT_KIND_COMM, name);
    if (!d) return plait_wrap_error(PLAIT_ERR_INVALID_CONFIG, "[comm] plugin = %s", name);
    /* On the cpu device the buffers are host memory: the transport must move
     * it, checked before joining so every rank fails at once. On another
     * device the check waits for its memory kind (below): a host transport
     * stages device tensors, one that moves device memory only (nccl) takes
     * them directly. */
    int on_device = strcmp(plait_config_str(run->cfg, "device", "plugin"), "cpu") != 0;
    plait_status st = on_device ? PLAIT_OK : plait_comm_plugin_usable(d, PLAIT_MEM_HOST);
    if (st != PLAIT_OK) return st;
    plait_comm_settings settings;
    st = plait_comm_settings_from_config(run->cfg, &settings);
    if (st == PLAIT_OK) st = plait_job_join(run->cfg, &run->world.job);
    /* the cpu device's precision rules name the config line; check them
     * before the device is opened with that precision */
    int precision = PLAIT_KERNELS_FP32;
    if (st == PLAIT_OK) st = plait_precision_from_config(run->cfg, &precision);
    /* the device first: after the fork, before any other plugin object */
    if (st == PLAIT_OK) {
        st = plait_device_open(plait_plugin_host(), run->cfg, plait_job_device_slot(run->world.job),
                               plait_job_math_threads(run->world.job));
        run->world.device_open = st == PLAIT_OK;
        plait_host_attach_device();
    }
    if (st == PLAIT_OK && on_device && plait_comm_plugin_usable(d, PLAIT_MEM_HOST) != PLAIT_OK) {
        plait_mem_kind kind = plait_device_mem_kind();
        st = plait_comm_plugin_usable(d, plait_mem_is_host(kind) ? PLAIT_MEM_HOST : kind);
    }
    if (st == PLAIT_OK) log_mesh_map(run);
    if (st == PLAIT_OK)
        st = plait_comm_nearest_card_defaults(run->cfg, plait_job_bind_result(run->world.job),
                                              plait_job_rank(run->world.job));
    if (st == PLAIT_OK) st = plait_comm_create_job_world(run->world.job, d->ops, run->cfg, &settings, &run->world.comm);
    if (st != PLAIT_OK) return st;
    plait_log_set_rank(plait_job_size(run->world.job) > 1 ? plait_job_rank(run->world.job) : -1);
    plait_kernels_set_threads(plait_job_math_threads(run->world.job));
    /* the core's own CPU kernels (the SGEMM peak behind MFU) match the rank's */
    if (plait_kernels_set_precision(precision) != 0)
        st = plait_set_error(PLAIT_ERR_INTERNAL, "the kernels refused precision mode %d", precision);
    char why[768];
    if (st == PLAIT_OK && plait_kernels_set_gemm(NULL, why, sizeof why) != 0)
        st = plait_set_error(PLAIT_ERR_INVALID_CONFIG, "the cpu's matrix products: %s", why);
    if (st != PLAIT_OK) return st;
    return plait_job_size(run->world.job) > 1 ? check_same_config(run) : PLAIT_OK;
}

void plait_run_close_world(plait_run *run) {
    if (run->world.comm) plait_comm_free(run->world.comm);
    run->world.comm = NULL;
    if (run->world.job) plait_job_leave(run->world.job, run->world.failed);
    run->world.job = NULL;
    if (run->world.device_open) {
        plait_device_close();
        plait_host_attach_device();
    }
    run->world.device_open = 0;
}
