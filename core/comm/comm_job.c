/* The world communicator of a joined job (launch/bootstrap.h), and the
 * bootstrap factory splits use: store-backed bootstraps over subsets. */
#include "comm/comm_job.h"

#include "plugin/loader.h"
#include "config/config.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "runtime/memory.h"

static plait_status job_create(void *ctx, uint32_t comm_id, int rank, int size, const int *world_ranks,
                               plait_bootstrap **out) {
    (void)rank;
    return plait_job_bootstrap_for(ctx, comm_id, size, world_ranks, out);
}

static void job_destroy(void *ctx, plait_bootstrap *bs) {
    (void)ctx;
    plait_bootstrap_free(bs);
}

plait_bootstrap_factory plait_job_bootstrap_factory(plait_job *job) {
    return (plait_bootstrap_factory){.ctx = job, .create = job_create, .destroy = job_destroy};
}

plait_status plait_comm_create_job_world(plait_job *job, const plait_comm_ops *ops, const plait_config *cfg,
                                         const plait_comm_settings *settings, plait_comm **out) {
    plait_bootstrap_factory f = plait_job_bootstrap_factory(job);
    return plait_comm_create_world(ops, cfg, plait_job_world(job), &f, settings, "world", out);
}

/* [section] key = value where the user left it unset. */
static plait_status card_default(plait_config *cfg, const char *section, const char *key, const char *value, int rank) {
    if (!*value || !plait_config_has_section(cfg, section) ||
        plait_config_origin(cfg, section, key, NULL) != PLAIT_ORIGIN_DEFAULT || *plait_config_str(cfg, section, key))
        return PLAIT_OK;
    plait_status st = plait_config_set_derived(cfg, section, key, value, "the card nearest the rank's GPU or cores");
    if (st == PLAIT_OK)
        PLAIT_INFO("comm", "rank %d: [%s] %s = %s (the card nearest its GPU or cores)", rank, section, key, value);
    return st;
}

plait_status plait_comm_nearest_card_defaults(plait_config *cfg, const plait_bind_result *nearest, int rank) {
    plait_status st = card_default(cfg, "comm.tcp", "ifname", nearest->ifname, rank);
    return st == PLAIT_OK ? card_default(cfg, "comm.verbs", "device", nearest->rdma, rank) : st;
}

plait_status plait_comm_plugin_usable(const plait_plugin_desc *desc, plait_mem_kind kind) {
    plait_status pst = plait_plugin_probe(desc);
    if (pst == PLAIT_ERR_TIMEOUT) return pst;
    if (pst != PLAIT_OK) return plait_wrap_error(PLAIT_ERR_UNSUPPORTED, "[comm] plugin = %s cannot run here", desc->name);
    const plait_comm_ops *ops = desc->ops;
    if (!(ops->mem_kinds & PLAIT_MEM_KIND_BIT(kind)))
        return plait_set_error(PLAIT_ERR_UNSUPPORTED,
                               "[comm] plugin = %s cannot run here: it moves %s memory only, and this command keeps "
                               "its buffers in %s memory; use a host-memory transport (tcp, verbs)",
                               desc->name, ops->mem_kinds == PLAIT_MEM_KIND_BIT(PLAIT_MEM_CUDA) ? "CUDA device" : "other",
                               kind == PLAIT_MEM_CUDA ? "CUDA device" : "host");
    return PLAIT_OK;
}
