/* plait config check|show FILE [section.key=value ...] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cost_device.h"
#include "cli/masters_check.h"
#include "cli/optim_check.h"
#include "cli/memory_check.h"
#include "cost/activations.h"
#include "cost/ckpt_cost.h"
#include "device/device.h"
#include "layout/batch.h"
#include "model/model.h"
#include "model/tied.h"
#include "runtime/error.h"
#include "train/preflight.h"
#include "train/run_trace.h"
#include "train/train_loop.h"

/* What a checkpoint of the layout costs, on this machine's defaults
 * ([cluster] disk_gbps of configs/clusters/this-machine.ini). */
static void print_checkpoint(plait_config *cfg) {
    plait_cluster c;
    plait_cluster_default(&c);
    plait_cost_ckpt k;
    if (plait_cost_ckpt_of_config(cfg, NULL, 0, &c, &k) != PLAIT_OK) {
        plait_clear_error(); /* the preflight above passed: nothing new to say */
        return;
    }
    plait_cost_ckpt_print(stdout, &k, cfg, &c);
}

/* What the experts' all-to-alls move a step: at ep 1 nothing, every rank
 * holding every expert; else a rank's bytes (cost/activations.h), with
 * the routed experts' parameters it holds. */
static void print_ep(plait_config *cfg, const plait_model_spec *s, int64_t E) {
    const int ep = (int)plait_config_int(cfg, "parallel", "ep"), cp = (int)plait_config_int(cfg, "parallel", "cp"),
              tp = (int)plait_config_int(cfg, "parallel", "tp");
    plait_batch b;
    if (ep <= 1 || plait_batch_from_config(cfg, &b) != PLAIT_OK) {
        plait_clear_error();
        printf("all-to-all bytes a step: 0 (ep = 1, every rank holds every expert)\n");
        return;
    }
    double blocks = 0;
    for (int32_t l = 0; l < s->n_layers; l++) {
        int sparse = 0;
        for (int32_t g = 0; g < s->n_params; g++)
            sparse |= s->params[g].layer == l && (s->params[g].flags & PLAIT_PARAM_EXPERT);
        blocks += sparse;
    }
    /* at tp × ep each expert's width is cut over tp too (its c_proj bias whole) */
    double held = 0;
    for (int32_t g = 0; g < s->n_params; g++)
        if ((s->params[g].flags & PLAIT_PARAM_EXPERT) && s->params[g].layer >= 0)
            held += (double)s->params[g].numel / ep / (tp > 1 && s->params[g].tp_role != PLAIT_TP_REPLICATE ? tp : 1);
    const double tokens = (double)b.micro_batch * (double)s->block_size / (cp > 1 ? cp : 1);
    /* recompute = full trades the forward's rows again before the backward */
    const int full = strcmp(plait_config_str(cfg, "model", "recompute"), "full") == 0;
    const double bytes = (full ? 1.5 : 1.0) * plait_cost_ep_bytes(tokens, plait_config_int(cfg, "model", "moe_top_k"),
                                                                  s->n_embd, E, ep, blocks, (double)b.accumulation);
    printf("all-to-all bytes a step: %.0f a rank sends at ep %d (%.0f sparse blocks x %lld micro-batches; the "
           "dispatch and combine, forward%s and backward, the routes spread evenly); each rank holds %lld of the %lld "
           "experts%s, %.3fM routed experts' parameters\n",
           bytes, ep, blocks, (long long)b.accumulation, full ? " (twice: recompute = full)" : "", (long long)(E / ep),
           (long long)E, tp > 1 ? ", each one's width over tp" : "", held / 1e6);
}

/* A mixture of experts' parameters, all of them and those a token uses
 * (its k routed experts of E), and what the experts' all-to-alls move a
 * step (print_ep). */
static void print_experts(plait_config *cfg) {
    plait_model_desc *d = NULL;
    if (plait_model_describe(cfg, 1, &d) != PLAIT_OK) return;
    const plait_model_spec *s = plait_model_desc_spec(d);
    double all = 0, active = 0, experts = 0;
    for (int32_t g = 0; plait_model_moe_experts(d) > 0 && g < s->n_params; g++) {
        if (plait_tied_is_copy(&s->params[g])) continue;
        double e = 1;
        for (int k = 0; k < s->params[g].ndim; k++) e *= (double)s->params[g].shape[k];
        const double share = plait_model_param_active(d, &s->params[g]);
        all += e;
        active += e * share;
        if (share > 0 && share < 1) experts += e;
    }
    if (plait_model_moe_experts(d) > 0) {
        printf("mixture of experts: %d experts, top %lld: %.3fM parameters, %.3fM of them the routed experts'; "
               "%.3fM active a token; ",
               (int)plait_model_moe_experts(d), (long long)plait_config_int(cfg, "model", "moe_top_k"), all / 1e6,
               experts / 1e6, active / 1e6);
        print_ep(cfg, s, plait_model_moe_experts(d));
    }
    plait_model_desc_free(d);
}

/* What `plait plan` predicts each rank of the layout will hold, on this
 * machine's defaults (the runtime's own bytes included), on the device its
 * ranks will open. */
static void print_memory(plait_config *cfg) {
    int n = 0;
    plait_cli_device dev;
    plait_cli_device_ask(cfg, &dev);
    plait_cost_mem *m = plait_cli_predict_memory(cfg, &dev.cost, &n);
    if (!m) return; /* the preflight above passed: nothing new to say */
    const double MiB = 1048576.0;
    char line[800];
    plait_cli_device_line(&dev, line, sizeof line);
    printf("%s\npredicted memory per rank (MiB; plait plan's model, see docs/plan.md):\n"
           "  rank  parameters  gradients  optimizer  activations  buffers  runtime    total\n",
           line);
    for (int r = 0; r < n; r++)
        printf("  %4d  %10.1f  %9.1f  %9.1f  %11.1f  %7.1f  %7.1f  %7.1f\n", r, m[r].param / MiB, m[r].grad / MiB,
               m[r].state / MiB, m[r].activations / MiB, m[r].buffers / MiB, m[r].process / MiB, m[r].total / MiB);
    if (n > 0 && (m[0].host_state > 0 || m[0].disk > 0)) {
        printf("offloaded optimizer state per rank (MiB; [optim] offload, not in the totals above):\n"
               "  rank  host memory     disk\n");
        for (int r = 0; r < n; r++) printf("  %4d  %11.1f  %7.1f\n", r, m[r].host_state / MiB, m[r].disk / MiB);
    }
    free(m);
    print_checkpoint(cfg);
}

/* The model's shape and parameters, a tied head once: what a published
 * count (Llama 3 8B's 8.0B) is compared with. */
static void print_model(const plait_config *cfg) {
    plait_model_desc *desc = NULL;
    if (plait_model_describe(cfg, 1, &desc) != PLAIT_OK) return; /* the preflight above described it */
    const plait_model_spec *s = plait_model_desc_spec(desc);
    const double n = plait_model_spec_params(s);
    printf("model: %s n_layer=%d n_head=%d n_embd=%d vocab=%d: %.0f parameters (%.2f%s)\n", s->arch, s->n_layer,
           s->n_head, s->n_embd, s->vocab_size, n, n >= 1e9 ? n / 1e9 : n / 1e6, n >= 1e9 ? "B" : "M");
    plait_model_desc_free(desc);
}

/* [run] residual = bf16 on a device whose kernels cannot widen bf16:
 * train's refusal (model/model.c), said before any rank starts, the device
 * asked as the memory check asks it (one that does not open here is left
 * to the ranks, which open it). On a run that is not bf16 the layout's
 * preflight refused it, in train's words. */
static plait_status check_residual(const plait_config *cfg) {
    if (strcmp(plait_config_str(cfg, "run", "residual"), "bf16") != 0 ||
        plait_device_precision(cfg) != PLAIT_PRECISION_BF16)
        return PLAIT_OK;
    /* the model widens the stream where a layer reads it: the device the
     * ranks open must have the kernel (one that does not open here is left
     * to the ranks) */
    plait_cli_device dev;
    plait_cli_device_ask(cfg, &dev);
    if (dev.fell_back || dev.cost.bf16_tensors) return PLAIT_OK;
    return plait_set_error(PLAIT_ERR_INVALID_ARG,
                           "[run] residual = bf16 needs a device whose kernels widen bf16 (from_bf16), and the %s "
                           "device's do not: the residual stream rounds to bf16 and is widened again where a layer "
                           "reads it (residual = fp32 keeps it float32)",
                           dev.counted);
}

/* [model] recompute_offload = host on the device the ranks will open,
 * asked as the memory check asks it (one that does not open here is left
 * to the ranks, which refuse it there: train/run_setup.c). */
static plait_status check_recompute_offload(const plait_config *cfg) {
    if (strcmp(plait_config_str(cfg, "model", "recompute_offload"), "host") != 0) return PLAIT_OK;
    plait_cli_device dev;
    plait_cli_device_ask(cfg, &dev);
    return plait_model_check_recompute_offload(cfg, dev.fell_back || dev.cost.own_memory, dev.counted);
}

static int cmd_config(int argc, char **argv, const plait_cli_job_opts *job) {
    (void)job; /* starts no ranks */
    if (argc < 3 || (strcmp(argv[1], "check") != 0 && strcmp(argv[1], "show") != 0)) {
        fprintf(stderr, "usage: plait config check|show FILE [section.key=value ...]\n");
        return 2;
    }
    plait_config *cfg = NULL;
    if (plait_cli_load_config(argv[2], argc - 3, argv + 3, &cfg) != PLAIT_OK) {
        plait_cli_print_error(NULL);
        return 1;
    }
    /* the layout too (batch arithmetic for dp, n_head % tp, the pipeline
     * partition): what would stop `plait train` stops check and show */
    int64_t trace_first, trace_last; /* [run] trace within [run] steps, as a run from step 1 reads it */
    if (plait_layout_preflight(cfg) != PLAIT_OK || plait_cli_check_masters(cfg) != PLAIT_OK ||
        plait_cli_check_optim(cfg) != PLAIT_OK || check_residual(cfg) != PLAIT_OK ||
        check_recompute_offload(cfg) != PLAIT_OK ||
        plait_run_trace_range(cfg, 1, plait_config_int(cfg, "run", "steps"), &trace_first, &trace_last) != PLAIT_OK) {
        plait_cli_print_error(argv[2]);
        plait_config_free(cfg);
        return 1;
    }
    if (strcmp(argv[1], "show") == 0) {
        plait_config_show(cfg, stdout);
        plait_config_free(cfg);
        return 0;
    }
    /* what train would refuse, check refuses: the table, then the verdict */
    print_model(cfg);
    print_experts(cfg);
    print_memory(cfg);
    int rc = 0;
    if (plait_cli_memory_check(cfg, argv[2], argc - 3, argv + 3, 0) != PLAIT_OK) {
        plait_cli_print_error(NULL);
        rc = 1;
    } else {
        /* the data and the initial weights may be made later, or live
         * only where the ranks run: noted, not refused (train refuses a
         * missing one before its run directory) */
        if (plait_train_check_inputs(cfg) != PLAIT_OK) {
            printf("note: %s; plait train refuses that before its run directory (make the file first, or run "
                   "train where it is)\n",
                   plait_last_error());
            plait_clear_error();
        }
        printf("%s: ok\n", argv[2]);
    }
    plait_config_free(cfg);
    return rc;
}

const plait_command plait_cmd_config = {
    "config", "check a config file, or show the effective config with each value's origin",
    "usage: plait config check FILE [section.key=value ...]\n"
    "       plait config show  FILE [section.key=value ...]\n\n"
    "check: validate FILE against every declared key (core sections and the selected plugins'\n"
    "       sections); exit 0 if valid, 1 with every problem listed as FILE:LINE: ... if not.\n"
    "       The layout is checked too: batch arithmetic for dp, the model against tp and pp,\n"
    "       and every rank's plan; then the memory 'plait plan' predicts for each rank, refused\n"
    "       (exit 1, naming what would fit) when the ranks on this host would not fit its memory.\n"
    "show:  print the effective configuration: each key's value, where it came from (default,\n"
    "       FILE:LINE, environment PLAIT_<SECTION>_<KEY>, command line, derived) and its doc.\n",
    cmd_config};
