/*
 * What a run reports: the start-up summary (layout, batch, model, memory per
 * rank) and the per-step metrics.csv row.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "cpu/compute_line.h"
#include "launch/bootstrap.h"
#include "launch/restart.h"
#include "model/tied.h"
#include "runtime/out_file.h"
#include "device/device.h"
#include "runtime/error.h"
#include "runtime/memory.h"
#include "runtime/log.h"
#include "train/run_ckpt.h"

#define MB (1024.0 * 1024.0)

/* Bytes this rank holds, in the ZeRO paper's categories: the optimizer
 * reports parameters, gradients and its state (whoever allocated them); the
 * core adds the model's bf16 copy of the weights to the parameters and its
 * working buffers (activations, deterministic accumulation). */
typedef struct run_memory {
    double param, grad, state, buffers, activations, rss_peak;
} run_memory;

static void collect_memory(plait_run *run, run_memory *m) {
    plait_optim_memory om = {.struct_size = sizeof om};
    run->optim.ops->memory(run->optim.state, &om);
    m->param = (double)om.param_bytes +
               (run->model.instance ? (double)plait_model_weight_copy_bytes(run->model.instance) : 0);
    m->grad = (double)om.grad_bytes;
    m->state = (double)om.state_bytes;
    m->buffers = (double)om.buffer_bytes + (double)plait_mem_usage_of("deterministic accumulation") +
                 (double)plait_mem_usage_of("checkpoint buffer");
    m->activations = run->model.instance ? (double)plait_model_activation_bytes(run->model.instance) : 0;
    m->rss_peak = (double)plait_peak_rss();
}

void plait_run_print_summary(plait_run *run, const char *out_dir, const char *resumed_from) {
    const plait_model_spec *s = run->model.spec;
    double n = 0, active = 0;
    for (int32_t g = 0; g < s->n_params; g++) {
        if (plait_tied_is_copy(&s->params[g])) continue;
        double e = 1;
        for (int d = 0; d < s->params[g].ndim; d++) e *= (double)s->params[g].shape[d];
        n += e;
        active += e * plait_model_param_active(run->model.desc, &s->params[g]);
    }
    char moe[96] = "";
    if (active < n) snprintf(moe, sizeof moe, " (%.2fM active a token)", active / 1e6);
    printf("plait: %s n_layer=%d n_head=%d n_embd=%d block=%d vocab=%d: %.2fM parameters%s\n", s->arch, s->n_layer,
           s->n_head, s->n_embd, s->block_size, s->vocab_size, n / 1e6, moe);
    /* cp and ep where the layout has them */
    char more[48] = "";
    if (run->world.mesh.cp > 1) snprintf(more, sizeof more, " cp=%d", run->world.mesh.cp);
    if (run->world.mesh.ep > 1) snprintf(more + strlen(more), sizeof more - strlen(more), " ep=%d", run->world.mesh.ep);
    printf("plait: layout dp=%d tp=%d pp=%d%s (%s, order %s), optimizer %s, comm %s\n", run->world.mesh.dp,
           run->world.mesh.tp, run->world.mesh.pp, more, plait_config_str(run->cfg, "parallel", "plugin"),
           run->world.mesh.order, plait_config_str(run->cfg, "optim", "plugin"),
           plait_config_str(run->cfg, "comm", "plugin"));
    printf("plait: global batch %" PRId64 " = dp %" PRId64 " x micro-batch %" PRId64 " x accumulation %" PRId64
           " (%" PRId64 " tokens/step)%s\n",
           run->work.batch.global_batch, run->work.batch.dp, run->work.batch.micro_batch, run->work.batch.accumulation,
           run->work.batch.global_batch * run->model.block_size, run->deterministic ? ", deterministic" : "");
    if (run->work.plan.summary[0]) printf("plait: %s\n", run->work.plan.summary);
    char compute[512];
    plait_compute_line(compute, sizeof compute, plait_job_math_threads(run->world.job),
                       plait_config_str(run->cfg, "run", "precision"));
    printf("plait: compute %s\n", compute);
    if (run->model.instance && plait_device_precision(run->cfg) == PLAIT_PRECISION_BF16) {
        /* a cp rank's head sees its share of each sequence alone */
        const int64_t rows = plait_model_head_chunk_rows(run->model.instance),
                      all = run->work.batch.micro_batch * run->model.block_size / run->world.mesh.cp;
        /* a sparse block's norm and router run float32, its experts bf16
         * where the device's kernels have their bf16 entries
         * (core/model/moe_bf16.c, moe_experts_bf16.c) */
        const char *sparse = plait_config_int(run->cfg, "model", "moe_experts") <= 0 ? ""
                             : plait_model_experts_bf16(run->model.instance)
                                 ? ", the sparse blocks' norms and routers"
                                 : ", the sparse blocks' norms, routers and experts";
        if (plait_model_bf16_activations(run->model.instance) && rows > 0)
            printf("plait: activations bf16 (what the products read and write; the residual stream%s, parameters "
                   "and gradients float32); the head's logits %" PRId64 " rows at a time (%" PRId64 " chunk%s)\n",
                   sparse, rows, (all + rows - 1) / rows, (all + rows - 1) / rows == 1 ? "" : "s");
        else if (plait_model_bf16_activations(run->model.instance))
            printf("plait: activations bf16 (what the products read and write; the residual stream, the "
                   "vocabulary-parallel head's logits and loss%s, parameters and gradients float32)\n",
                   sparse);
        else
            printf("plait: activations float32, each product's operands rounded to bf16 (the device's kernels or "
                   "this layout keep no bf16 activations: docs/gpu.md)\n");
    }
    run_memory m;
    collect_memory(run, &m);
    printf("plait: memory on rank 0: parameters %.1f MB, gradients %.1f MB, optimizer state %.1f MB, buffers "
           "%.1f MB; peak RSS so far %.1f MB\n",
           m.param / MB, m.grad / MB, m.state / MB, m.buffers / MB, m.rss_peak / MB);
    printf("plait: run directory %s%s%s\n", out_dir, resumed_from ? ", resuming from " : "",
           resumed_from ? resumed_from : "");
    fflush(stdout);
}

plait_status plait_run_gather_memory(plait_run *run, double *rows) {
    int world = run->world.mesh.world_size;
    memset(rows, 0, sizeof(double) * (size_t)world * PLAIT_RUN_MEM_FIELDS);
    run_memory m;
    collect_memory(run, &m);
    double *r = rows + (size_t)run->world.mesh.world_rank * PLAIT_RUN_MEM_FIELDS;
    const plait_step_timing *t = &run->timing.last_step;
    const double mine[PLAIT_RUN_MEM_FIELDS] = {run->world.mesh.dp_rank,
                                               run->world.mesh.tp_rank,
                                               run->world.mesh.pp_rank,
                                               m.param,
                                               m.grad,
                                               m.state,
                                               m.buffers,
                                               m.activations,
                                               m.rss_peak,
                                               (double)t->dp_bytes,
                                               (double)t->tp_bytes,
                                               (double)t->pp_bytes,
                                               run->world.mesh.cp_rank,
                                               run->world.mesh.ep_rank};
    memcpy(r, mine, sizeof mine);
    if (world == 1) return PLAIT_OK;
    /* one row per rank, zeros elsewhere: the sum is a gather */
    return plait_comm_allreduce(run->world.comm, rows, rows, (size_t)world * PLAIT_RUN_MEM_FIELDS,
                                               PLAIT_F64, PLAIT_SUM, NULL, NULL);
}

void plait_run_print_memory_table(const plait_run *run, const double *rows) {
    if (run->world.mesh.world_size == 1) return;
    printf("plait: memory per rank (MB):  rank  dp tp pp  parameters  gradients  optimizer  buffers  peak RSS\n");
    for (int r = 0; r < run->world.mesh.world_size; r++) {
        const double *v = rows + (size_t)r * PLAIT_RUN_MEM_FIELDS;
        printf("plait:                        %4d  %2.0f %2.0f %2.0f  %10.2f  %9.2f  %9.2f  %7.2f  %8.1f\n", r, v[0],
               v[1], v[2], v[3] / MB, v[4] / MB, v[5] / MB, v[6] / MB, v[8] / MB);
    }
    fflush(stdout);
}

plait_status plait_run_write_memory_csv(const plait_run *run, const double *rows, const char *path) {
    FILE *f;
    static const char header[] = "rank,dp,tp,pp,param_bytes,grad_bytes,optim_state_bytes,buffer_bytes,"
                                 "activation_bytes,peak_rss_bytes,dp_bytes,tp_bytes,pp_bytes,cp,ep\n";
    /* never over a file plait did not write */
    plait_status st = plait_out_check_own(path, "rank,", "the run's memory report");
    if (st == PLAIT_OK) st = plait_out_fopen(path, "w", &f);
    if (st != PLAIT_OK) return plait_wrap_error(st, "cannot write the memory report");
    fputs(header, f);
    for (int r = 0; r < run->world.mesh.world_size; r++) {
        const double *v = rows + (size_t)r * PLAIT_RUN_MEM_FIELDS;
        fprintf(f, "%d", r);
        for (int k = 0; k < PLAIT_RUN_MEM_FIELDS; k++) fprintf(f, ",%.0f", v[k]);
        fputc('\n', f);
    }
    if (fclose(f) != 0) return plait_set_error(PLAIT_ERR_SYSTEM, "%s: cannot write the memory report", path);
    return PLAIT_OK;
}

void plait_run_print_bubble(const plait_run *run) {
    int32_t pp = run->world.mesh.pp;
    int64_t steps = run->timing.bubble_steps - 1;
    if (pp < 2 || steps < 1 || run->timing.pipe_span_sum <= 0) return;
    char per_stage[512] = "";
    size_t used = 0;
    double share = 0;
    for (int32_t s = 0; s < pp; s++) {
        double x = run->timing.stage_idle_sum[s] / run->timing.pipe_span_sum;
        share += x / pp;
        if (used < sizeof per_stage)
            used += (size_t)snprintf(per_stage + used, sizeof per_stage - used, "%s%.1f%%", s ? " " : "", 100 * x);
    }
    printf("plait: pipeline idle measured %.1f%% of the pipeline phase (mean of stages: %s; %lld steps, "
           "%.1f ms/step), expected %s\n",
           100 * share, per_stage, (long long)steps, 1e3 * run->timing.pipe_span_sum / (double)steps, run->work.plan.summary);
    fflush(stdout);
}

void plait_run_fill_metrics(plait_run *run, plait_metrics *mt, const plait_step_result *r, double val_loss) {
    const plait_step_timing *t = &r->t;
    double tokens = (double)run->work.batch.global_batch * run->model.block_size;
    plait_metrics_set_named(mt, "step", (double)run->step);
    plait_run_moe_metrics(run, mt);
    plait_metrics_set_named(mt, "restarts", (double)plait_restart_count()); /* launch/restart.h */
    /* an elastic job's hosts and the changes of membership so far (one
     * launcher alone: 1 host, none) */
    int hosts = plait_restart_hosts();
    plait_metrics_set_named(mt, "hosts", (double)(hosts > 0 ? hosts : 1));
    plait_metrics_set_named(mt, "membership_changes", (double)plait_restart_changes());
    plait_metrics_set_named(mt, "loss", r->loss);
    if (val_loss >= 0) plait_metrics_set_named(mt, "val_loss", val_loss);
    plait_metrics_set_named(mt, "lr", r->lr);
    plait_metrics_set_named(mt, "grad_norm", r->grad_norm);
    plait_metrics_set_named(mt, "tokens_per_s", tokens / t->step_s);
    plait_metrics_set_named(mt, "step_ms", 1e3 * t->step_s);
    plait_metrics_set_named(mt, "compute_ms", 1e3 * t->compute_s);
    plait_metrics_set_named(mt, "comm_ms", 1e3 * t->comm_s);
    plait_metrics_set_named(mt, "idle_ms", 1e3 * t->idle_s);
    plait_metrics_set_named(mt, "tp_ms", 1e3 * t->tp_s);
    plait_metrics_set_named(mt, "bubble_measured", r->bubble);
    if (run->work.plan.bubble_formula >= 0) plait_metrics_set_named(mt, "bubble_formula", run->work.plan.bubble_formula);
    plait_metrics_set_named(mt, "pipe_span_ms", 1e3 * r->pipe_span_s);
    for (int32_t s = 0; s < run->world.mesh.pp; s++) {
        char name[32];
        snprintf(name, sizeof name, "idle_ms_stage%d", (int)s);
        plait_metrics_set_named(mt, name, 1e3 * run->timing.stage_idle_s[s]);
    }
    plait_metrics_set_named(mt, "dp_bytes", (double)t->dp_bytes);
    plait_metrics_set_named(mt, "tp_bytes", (double)t->tp_bytes);
    plait_metrics_set_named(mt, "pp_bytes", (double)t->pp_bytes);
    plait_metrics_set_named(mt, "optim_bytes", (double)t->optim_bytes);
    plait_metrics_set_named(mt, "early_buckets", (double)t->early_reductions);
    run_memory m;
    collect_memory(run, &m);
    plait_metrics_set_named(mt, "peak_rss_mb", m.rss_peak / MB);
    plait_metrics_set_named(mt, "param_mb", m.param / MB);
    plait_metrics_set_named(mt, "grad_mb", m.grad / MB);
    plait_metrics_set_named(mt, "optim_state_mb", m.state / MB);
    plait_metrics_set_named(mt, "buffer_mb", m.buffers / MB);
    plait_metrics_set_named(mt, "activation_mb", m.activations / MB);
}
