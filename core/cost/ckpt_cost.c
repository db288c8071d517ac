/* A checkpoint's bytes, memory and save time per ckpt_format (ckpt_cost.h). */
#include "cost/ckpt_cost.h"

#include <stdlib.h>
#include <string.h>

#include "cost/layouts.h"
#include "cost/stages.h"
#include "device/device.h"
#include "layout/batch.h"
#include "model/model.h"
#include "model/tied.h"
#include "runtime/error.h"

/* float32 parameters and Adam's two float32 moments */
#define CKPT_BYTES_PER_PARAM 12.0

void plait_cost_ckpt_predict(double params, double largest, const plait_cost_rank *stages, const plait_cost_layout *l,
                             double bucket_bytes, const plait_cluster *c, plait_cost_ckpt *out) {
    memset(out, 0, sizeof *out);
    out->params = params;
    out->largest = largest;
    out->total = params * CKPT_BYTES_PER_PARAM;
    /* cp ranks hold what their dp peers hold: ZeRO shards over dp x cp */
    const int dp = l->dp * (l->cp > 1 ? l->cp : 1);
    out->ranks = dp * l->tp * l->pp;
    const int zero = plait_cost_zero_stage(l->optim);
    /* a stage's routed experts at ep > 1: a rank holds E / ep of them
     * (stages[s].expert_numel), the stage ep times that */
    const int ep = l->ep > 1 && dp % l->ep == 0 ? l->ep : 1;
    double held = 0;
    for (int s = 0; s < l->pp; s++) held += stages[s].param_numel + (ep - 1) * (ep > 1 ? stages[s].expert_numel : 0);

    /* sharded: stage s's share, 1/tp of it a TP rank's, then the DP split;
     * the dense part as the optimizer holds it over dp, the experts' over
     * the dp / ep ranks holding the same ones (run_ckpt_shard.c) */
    plait_cost_ckpt_format *sh = &out->sharded;
    for (int s = 0; s < l->pp; s++) {
        double x = ep > 1 ? ep * stages[s].expert_numel : 0, d = stages[s].param_numel - x / ep;
        double part = held > 0 ? out->total / held / l->tp : 0;
        double rank = held > 0 ? part * (d + x) : out->total / l->pp / l->tp, dense = held > 0 ? part * d : rank;
        double experts = rank - dense;
        /* DP rank 0 writes the most: ZeRO-3 1/dp of all; ZeRO-1/2 the
         * moments' 1/dp and the parameters whole (the experts': its E/ep
         * of them, each of the first ep ranks its own); Adam all of it
         * (again the experts' E/ep) */
        double dp0 = zero >= 3   ? rank / dp
                     : zero >= 1 ? dense * (4.0 + 8.0 / dp) / 12.0 + experts * (4.0 / ep + 8.0 / dp) / 12.0
                                 : dense + experts / ep;
        if (dp0 > sh->rank_max) sh->rank_max = dp0;
        if (s == 0) sh->rank0 = dp0;
        sh->all_ranks += rank * l->tp;
    }
    /* rank 0's largest parameter slice (stage 0's, as tp and ep cut it),
     * else its tp slice of the largest tensor (a layout the stages refuse) */
    const double local = stages[0].largest_tensor_numel > 0 ? stages[0].largest_tensor_numel : largest / l->tp;
    /* one buffer of the largest part the rank exports (run_ckpt_shard.c):
     * that slice whole, but under ZeRO-3 its range of the slice's unit,
     * 1/n of it over the n ranks sharing it (dp; an expert's dp / ep, the
     * fewer, counted for both): a slice of a bucket or more is a unit
     * alone, a smaller one shares a unit of at most a bucket, so the range
     * is at most min(slice, max(slice, bucket) / n), largest for the
     * largest slice; with ckpt_async the snapshot of everything the rank
     * writes */
    const double n = ep > 1 ? dp / ep : dp, bucket = plait_cost_zero_unit_bytes(bucket_bytes, zero, (int)n) / 4.0;
    const double unit = local > bucket ? local : bucket;
    sh->rank0_extra = 4.0 * (zero >= 3 && unit / n < local ? unit / n : local);
    sh->async_extra = sh->rank0;
    double disk = c->disk_bandwidth > 0 ? c->disk_bandwidth : 2e9;
    double writer = c->disk_writer_bandwidth > 0 ? c->disk_writer_bandwidth : disk;
    sh->save_s = out->total / disk > sh->rank_max / writer ? out->total / disk : sh->rank_max / writer;

    /* gathered: everything through rank 0, over its link, then its disk */
    plait_cost_ckpt_format *g = &out->gathered;
    g->rank_max = g->rank0 = g->all_ranks = out->total;
    /* the full tensor, rank 0's slice of it, and with tp every tp rank's
     * slice (run_ckpt.c, gather_and_write) */
    g->rank0_extra = 4.0 * (largest + local + (l->tp > 1 ? local * l->tp : 0));
    const plait_link *link = plait_cluster_link(c, out->ranks, out->ranks, 1);
    double recv = out->ranks > 1 && link->bandwidth > 0 ? out->total * (out->ranks - 1) / out->ranks / link->bandwidth
                                                        : 0;
    g->save_s = recv + out->total / writer;
}

/* The model's parameters (tied copies once) and its largest tensor. */
static plait_status model_sizes(const plait_config *cfg, double *params, double *largest) {
    plait_model_desc *desc = NULL;
    plait_status st = plait_model_describe(cfg, 1, &desc);
    if (st != PLAIT_OK) return st;
    const plait_model_spec *spec = plait_model_desc_spec(desc);
    *params = *largest = 0;
    for (int32_t g = 0; g < spec->n_params; g++) {
        const plait_param *p = &spec->params[g];
        if (plait_tied_is_copy(p)) continue;
        *params += (double)p->numel;
        if ((double)p->numel > *largest) *largest = (double)p->numel;
    }
    plait_model_desc_free(desc);
    return PLAIT_OK;
}

/* The config's own layout (its cp ranks, which hold the parameters dp's
 * do, counted into dp) and global batch. */
static plait_status config_layout(plait_config *cfg, plait_cost_layout *l, int64_t *global_batch) {
    plait_batch batch;
    plait_status st = plait_batch_from_config(cfg, &batch);
    if (st != PLAIT_OK) return st;
    memset(l, 0, sizeof *l);
    l->dp = (int)(plait_config_int(cfg, "parallel", "dp") * plait_config_int(cfg, "parallel", "cp"));
    l->tp = (int)plait_config_int(cfg, "parallel", "tp");
    l->pp = (int)plait_config_int(cfg, "parallel", "pp");
    l->ep = plait_config_int(cfg, "model", "moe_experts") > 0 ? (int)plait_config_int(cfg, "parallel", "ep") : 1;
    plait_value v;
    l->chunks = plait_config_get(cfg, "parallel.pp", "virtual_stages", &v) == PLAIT_OK ? (int)v.i : 1;
    snprintf(l->schedule, sizeof l->schedule, "%s", l->pp > 1 ? "1f1b" : "");
    snprintf(l->optim, sizeof l->optim, "%s", plait_config_str(cfg, "optim", "plugin"));
    l->micro_batch = batch.micro_batch;
    *global_batch = batch.global_batch;
    return PLAIT_OK;
}

plait_status plait_cost_ckpt_of_config(plait_config *cfg, const plait_cost_layout *layout, int64_t global_batch,
                                       const plait_cluster *c, plait_cost_ckpt *out) {
    double params, largest;
    plait_status st = model_sizes(cfg, &params, &largest);
    plait_cost_layout own;
    if (st == PLAIT_OK && !layout) st = config_layout(cfg, &own, &global_batch);
    if (st != PLAIT_OK) return st;
    const plait_cost_layout *l = layout ? layout : &own;
    plait_cost_model *m = NULL;
    if ((st = plait_cost_model_new(cfg, &m)) != PLAIT_OK) return st;
    plait_cost_rank *stages = calloc((size_t)l->pp, sizeof *stages);
    plait_cost_device dev;
    plait_cost_device_planned(cfg, c->gpu, &dev);
    char why[256];
    /* a layout the model cannot be cut into: the stages' shares as equal */
    if (stages && !plait_cost_model_refuses(m, l->tp, l->pp, l->chunks, why, sizeof why) &&
        plait_cost_model_stages(m, l, global_batch, plait_device_precision(cfg), &dev, stages) != 0)
        st = plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory costing a checkpoint");
    if (!stages) st = plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory costing a checkpoint");
    if (st == PLAIT_OK)
        plait_cost_ckpt_predict(params, largest, stages, l, plait_cost_bucket_bytes(cfg, l->optim, l->bucket_mb), c,
                                out);
    free(stages);
    plait_cost_model_free(m);
    return st;
}

/* `bytes` in MB, GB or TB (decimal, as disks are sold), into buf. */
static const char *size(char *buf, size_t cap, double bytes) {
    if (bytes >= 1e12) snprintf(buf, cap, "%.2f TB", bytes / 1e12);
    else if (bytes >= 1e9) snprintf(buf, cap, "%.2f GB", bytes / 1e9);
    else snprintf(buf, cap, "%.1f MB", bytes / 1e6);
    return buf;
}

static void line(FILE *out, const char *format, int chosen, int async, const plait_cost_ckpt_format *f,
                 const plait_cost_ckpt *k) {
    char a[32], b[32], c[32];
    fprintf(out,
            "  %-8s %-17s rank 0 writes %s, the busiest rank %s; rank 0 holds %s more while saving%s; save %.3g s\n",
            format, chosen ? (async ? "(chosen, async):" : "(chosen):") : ":", size(a, sizeof a, f->rank0),
            size(b, sizeof b, f->rank_max), size(c, sizeof c, async ? f->async_extra : f->rank0_extra),
            async ? " (its host snapshot)" : "", f->save_s);
    fprintf(out, "  %-8s %-17s bytes: rank 0 %.0f, the busiest rank %.0f, all %d ranks %.0f\n", "", "", f->rank0,
            f->rank_max, k->ranks, f->all_ranks);
}

void plait_cost_ckpt_print(FILE *out, const plait_cost_ckpt *k, const plait_config *cfg, const plait_cluster *c) {
    if (k->ranks < 1) return;
    const char *chosen = plait_config_str(cfg, "run", "ckpt_format");
    plait_value v;
    int async = plait_config_get(cfg, "run", "ckpt_async", &v) == PLAIT_OK && v.i != 0;
    int sharded = chosen && strcmp(chosen, "sharded") == 0;
    char a[32], b[32];
    fprintf(out,
            "checkpoint: %s, %.0f bytes (%.0f parameters, float32, and Adam's two moments; largest tensor %s), "
            "at [cluster] disk_gbps %.3g, disk_writer_gbps %.3g:\n",
            size(a, sizeof a, k->total), k->total, k->params, size(b, sizeof b, 4 * k->largest),
            c->disk_bandwidth / 1e9, c->disk_writer_bandwidth / 1e9);
    line(out, sharded ? "sharded" : "gathered", 1, async && sharded, sharded ? &k->sharded : &k->gathered, k);
    line(out, sharded ? "gathered" : "sharded", 0, 0, sharded ? &k->gathered : &k->sharded, k);
}
