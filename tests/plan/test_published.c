/*
 * `plait plan` against published large-scale training runs
 * (published/runs.tsv: the model, the cluster, the layout, the measured
 * throughput, and where each figure comes from). For every run: whether
 * the published layout fits plait's memory count (within 10% of the
 * per-GPU memory the source states, where it states one), the planner's
 * prediction for it (where the source leaves a setting out, the planner's
 * best value for it) beside the measured throughput, both as MFU, and the
 * planner's first choice for the same model, batch and GPUs.
 *
 * The goals: every published layout fits; the prediction within 15% of
 * the measurement for at least 80% of the runs; the MFU within 5 points
 * (median). The test fails where the goals that hold now would regress
 * (the bounds below), on a row it cannot read, or when a search fails.
 * Prints the table docs/plan.md shows (markdown), and with an argument
 * writes it to that file.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "host/host_table.h"
#include "cost/ckpt_cost.h"
#include "cost/cluster.h"
#include "cost/search.h"
#include "layout/batch.h"
#include "runtime/error.h"

/* What the goals' tests hold: the counts met now, so that they cannot
 * regress unnoticed (docs/plan.md gives the table they come from). */
/* of the 69 published layouts, fitting plait's count */
#define MIN_FITTING 69
/* predicted within 15% (the H100's constant, set again on its one row
 * once the pipeline's partition put the first stages' spare blocks last,
 * took two Llama 3.1 405B rows out; ZeRO-3 gathering the weights the
 * products read in bf16 took OPT-175B out, whose FSDP run measured slower
 * than plait's count of that; the distributed optimizer gathering them in
 * bf16 sped the H100's row up, and its constant, set again there, took
 * fourteen DGX Cloud rows out; the head's products reading bf16 under tp,
 * their weights gathered so by the distributed optimizer, brought the
 * 2,048-GPU Nemotron-4 15B row from -15.006% to -14.996%, in: docs/plan.md) */
#define MIN_WITHIN_15 39
/* points between the predicted and the measured MFU, the median: 6.9 now,
 * where the goal is 5 (the DGX Cloud rows, and OPT-175B since ZeRO-3's
 * bf16 gathers: docs/plan.md) */
#define MAX_MEDIAN_MFU 6.95

typedef struct run {
    char name[64], source[512], arch[16], cluster[64], schedule[16], sp[4], optim[32], recompute[16], unit[32],
        note[512];
    int n_layer, n_head, n_embd, n_kv_head, ffn, vocab, seq, gpus, tp, pp, dp, cp, mb, chunks;
    int overlap_gather; /* optim "zero1+overlap", "zero2+overlap": [optim.zeroN] overlap_param_gather */
    int bf16_grads;     /* optim "zero1+bf16grads": [optim.zero1] grad_accum = bf16 */
    int bf16_moments;   /* optim "...+bf16moments": [optim] moments = bf16 */
    int offload;        /* recompute "full+offload": [model] recompute_offload = host */
    int lean;           /* optim "zero3+lean": [optim.zero3] prefetch_layers = 0, max_inflight = 1 */
    long long global_batch;
    double measured, memory_gb;
} run;

static const char *source_dir(void) {
    const char *s = getenv("PLAIT_SOURCE_DIR");
    return s ? s : ".";
}

/* One tab-separated row into r; 0 on success. */
static int parse_row(char *line, run *r) {
    char *f[32];
    int k = 0;
    for (char *save = NULL, *p = strtok_r(line, "\t\n", &save); p && k < 32; p = strtok_r(NULL, "\t\n", &save))
        f[k++] = p;
    if (k != 27) return -1;
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", f[0]);
    snprintf(r->source, sizeof r->source, "%s", f[1]);
    snprintf(r->arch, sizeof r->arch, "%s", f[2]);
    r->n_layer = atoi(f[3]);
    r->n_head = atoi(f[4]);
    r->n_embd = atoi(f[5]);
    r->n_kv_head = atoi(f[6]);
    r->ffn = atoi(f[7]);
    r->vocab = atoi(f[8]);
    r->seq = atoi(f[9]);
    r->gpus = atoi(f[10]);
    snprintf(r->cluster, sizeof r->cluster, "%s", f[11]);
    r->global_batch = atoll(f[12]);
    r->tp = atoi(f[13]);
    r->pp = atoi(f[14]);
    r->dp = atoi(f[15]);
    r->cp = atoi(f[16]);
    r->mb = atoi(f[17]);
    snprintf(r->schedule, sizeof r->schedule, "%s", f[18]);
    r->chunks = atoi(f[19]);
    snprintf(r->sp, sizeof r->sp, "%s", f[20]);
    snprintf(r->optim, sizeof r->optim, "%s", f[21]);
    char *plus = strchr(r->optim, '+');
    if (plus) {
        int z1 = !strncmp(r->optim, "zero1", 5), z2 = !strncmp(r->optim, "zero2", 5);
        for (char *save = NULL, *t = strtok_r(plus + 1, "+", &save); t; t = strtok_r(NULL, "+", &save)) {
            if (!strcmp(t, "overlap") && (z1 || z2)) r->overlap_gather = 1;
            else if (!strcmp(t, "bf16grads") && z1) r->bf16_grads = 1;
            else if (!strcmp(t, "bf16moments")) r->bf16_moments = 1;
            else if (!strcmp(t, "lean") && !strncmp(r->optim, "zero3", 5)) r->lean = 1;
            else return -1;
        }
        *plus = 0;
    }
    snprintf(r->recompute, sizeof r->recompute, "%s", f[22]);
    if (!strcmp(r->recompute, "full+offload")) r->offload = 1, snprintf(r->recompute, sizeof r->recompute, "full");
    r->measured = atof(f[23]);
    r->memory_gb = atof(f[24]);
    snprintf(r->unit, sizeof r->unit, "%s", f[25]);
    snprintf(r->note, sizeof r->note, "%s", f[26]);
    if (r->cp < 1 || r->tp * r->pp * r->dp * r->cp != r->gpus || r->measured <= 0 || r->global_batch < 1) return -1;
    if (strcmp(r->arch, "gpt") && strcmp(r->arch, "llama")) return -1;
    return 0;
}

/* Model FLOPs a token, the MFU's count: 6N + 12 l h s, N the parameters
 * of the blocks and an untied output (the llama arch's SwiGLU and
 * grouped-query projections as they are). */
static double model_flops_per_token(const run *r) {
    double l = r->n_layer, h = r->n_embd, s = r->seq, V = r->vocab;
    double block = 12 * h * h;
    if (!strcmp(r->arch, "llama")) {
        double kv = r->n_kv_head > 0 ? r->n_kv_head : r->n_head, hs = h / r->n_head;
        block = 2 * h * h + 2 * h * kv * hs + 3 * h * r->ffn;
    }
    return 6 * (l * block + 2 * V * h) + 12 * l * h * s;
}

/* The measured throughput in tokens/s, by the count the source used. */
static double measured_tokens_per_s(const run *r) {
    double B = (double)r->global_batch, s = r->seq, l = r->n_layer, h = r->n_embd, V = r->vocab, n = r->gpus;
    if (!strcmp(r->unit, "iteration_s")) return B * s / r->measured;
    if (!strcmp(r->unit, "tflops_recompute")) {
        /* Megatron-LM's Eq. 3: 96 B s l h^2 (1 + s/6h + V/16lh) a step */
        double F = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
        return B * s / (F / (r->measured * 1e12 * n));
    }
    if (!strcmp(r->unit, "tflops_model")) return r->measured * 1e12 * n / model_flops_per_token(r);
    return -1;
}

typedef struct loader_ctx {
    char base[1024];
    char over[24][96];
    int n;
} loader_ctx;

static plait_status load(void *ctx, int n, char *const *overrides, plait_config **out) {
    loader_ctx *c = ctx;
    char *all[48];
    int k = 0;
    for (int i = 0; i < c->n; i++) all[k++] = c->over[i];
    for (int i = 0; i < n && k < 48; i++) all[k++] = overrides[i];
    return plait_cli_load_config(c->base, k, all, out);
}

static void layout_text(const plait_cost_layout *l, char *buf, size_t len) {
    plait_cost_layout_name_every(l, buf, len);
}

typedef struct outcome {
    double measured, predicted, first_tokens;
    double mfu_measured, mfu_predicted; /* % of the cluster's bf16 peak */
    double mem_gib, limit_gib;          /* the published layout's memory by plait's count, and the limit */
    int fits, within_15;
    char first[128], published[128];
} outcome;

/* The published layout's predicted checkpoint (core/cost/ckpt_cost.h),
 * printed, and consistent: the sharded ranks together and gathered rank 0
 * write the whole checkpoint (12 bytes a parameter), no sharded rank less
 * than its share, ZeRO-3 without tp or pp exactly 1/ranks each, the
 * sharded save no slower. -1 (said) when not. */
static int ckpt_check(const run *r, plait_config *cfg, const plait_cost_layout *l, const plait_cluster *c) {
    plait_cost_ckpt k;
    if (plait_cost_ckpt_of_config(cfg, l, r->global_batch, c, &k) != PLAIT_OK) {
        fprintf(stderr, "%s: the checkpoint's cost: %s\n", r->name, plait_last_error());
        return -1;
    }
    printf("%s checkpoint: %.4g TB; sharded: the busiest rank %.4g GB x %d ranks, save %.3g s; gathered: rank 0 "
           "%.4g TB, save %.3g s\n",
           r->name, k.total / 1e12, k.sharded.rank_max / 1e9, k.ranks, k.sharded.save_s, k.gathered.rank0 / 1e12,
           k.gathered.save_s);
    const double tol = 1e-9 * k.total;
    const int even = plait_cost_zero_stage(l->optim) == 3 && l->tp == 1 && l->pp == 1;
    if (k.ranks != r->gpus || fabs(k.total - 12 * k.params) > tol || fabs(k.sharded.all_ranks - k.total) > tol ||
        fabs(k.gathered.rank0 - k.total) > tol || k.sharded.rank_max * k.ranks < k.total - tol ||
        (even && fabs(k.sharded.rank_max * k.ranks - k.total) > tol) || k.sharded.save_s > k.gathered.save_s ||
        k.sharded.save_s <= 0) {
        fprintf(stderr,
                "%s: the predicted checkpoint does not add up: %.0f bytes, sharded %.0f x %d (all %.0f), "
                "gathered %.0f, saves %g / %g s\n",
                r->name, k.total, k.sharded.rank_max, k.ranks, k.sharded.all_ranks, k.gathered.rank0, k.sharded.save_s,
                k.gathered.save_s);
        return -1;
    }
    return 0;
}

/* Search `axes` (show 1); the best fitting, else (mem_limit lifted) the best. */
static int best_of(const plait_cost_axes *axes, plait_config *cfg, plait_cost_ctx *x, plait_cost_result *best,
                   int *fits) {
    plait_cost_search s;
    if (plait_cost_search_run(axes, cfg, x, 1, &s) != PLAIT_OK) return -1;
    *fits = s.n > 0;
    if (s.n > 0) *best = s.results[0];
    plait_cost_search_free(&s);
    if (*fits) return 0;
    plait_cost_ctx lifted = *x;
    lifted.mem_limit = 1e30;
    if (plait_cost_search_run(axes, cfg, &lifted, 1, &s) != PLAIT_OK) return -1;
    int ok = s.n > 0;
    if (ok) *best = s.results[0];
    plait_cost_search_free(&s);
    return ok ? 0 : -1;
}

static int weigh(const run *r, outcome *o) {
    memset(o, 0, sizeof *o);
    loader_ctx lc;
    snprintf(lc.base, sizeof lc.base, "%s/tests/plan/published/gpt.ini", source_dir());
    lc.n = 0;
    snprintf(lc.over[lc.n++], 96, "model.arch=%s", r->arch);
    if (!strcmp(r->arch, "llama")) {
        snprintf(lc.over[lc.n++], 96, "model.n_kv_head=%d", r->n_kv_head > 0 ? r->n_kv_head : r->n_head);
        snprintf(lc.over[lc.n++], 96, "model.ffn_hidden=%d", r->ffn);
    }
    snprintf(lc.over[lc.n++], 96, "model.n_layer=%d", r->n_layer);
    snprintf(lc.over[lc.n++], 96, "model.n_head=%d", r->n_head);
    snprintf(lc.over[lc.n++], 96, "model.n_embd=%d", r->n_embd);
    snprintf(lc.over[lc.n++], 96, "model.vocab_size=%d", r->vocab);
    snprintf(lc.over[lc.n++], 96, "model.block_size=%d", r->seq);
    snprintf(lc.over[lc.n++], 96, "data.global_batch=%lld", r->global_batch);
    snprintf(lc.over[lc.n++], 96, "comm.plugin=tcp");
    snprintf(lc.over[lc.n++], 96, "run.log_level=error");
    if (r->overlap_gather) snprintf(lc.over[lc.n++], 96, "optim.%s.overlap_param_gather=true", r->optim);
    if (r->bf16_grads) snprintf(lc.over[lc.n++], 96, "optim.zero1.grad_accum=bf16");
    if (r->bf16_moments) snprintf(lc.over[lc.n++], 96, "optim.moments=bf16");
    if (r->lean) {
        snprintf(lc.over[lc.n++], 96, "optim.zero3.prefetch_layers=0");
        snprintf(lc.over[lc.n++], 96, "optim.zero3.max_inflight=1");
    }
    if (r->offload) { /* valid beside recompute = full alone */
        snprintf(lc.over[lc.n++], 96, "model.recompute=full");
        snprintf(lc.over[lc.n++], 96, "model.recompute_offload=host");
    }
    plait_config *cfg = NULL;
    if (load(&lc, 0, NULL, &cfg) != PLAIT_OK) {
        fprintf(stderr, "%s: %s\n", r->name, plait_last_error());
        return -1;
    }
    char path[1200];
    snprintf(path, sizeof path, "%s/configs/clusters/%s.ini", source_dir(), r->cluster);
    plait_cluster c;
    if (plait_cluster_load(path, &c) != PLAIT_OK) {
        fprintf(stderr, "%s: %s\n", r->name, plait_last_error());
        plait_config_free(cfg);
        return -1;
    }
    plait_cost_ctx x = {.cluster = &c,
                        .precision = PLAIT_PRECISION_BF16,
                        .hierarchical = 1,
                        .global_batch = r->global_batch,
                        .load = load,
                        .load_ctx = &lc};
    plait_cost_ctx_from_config(cfg, &x); /* as plait plan reads the optimizer's and tp's keys */
    /* the device a GPU cluster's ranks run, as `plait plan --cluster` counts
     * them: its bf16 path decides the activations' type and the weights' bf16
     * copy, so the table's figures are those --explain gives */
    plait_cost_device_planned(cfg, c.gpu, &x.device);
    plait_cost_axes axes;
    memset(&axes, 0, sizeof axes);
    axes.ranks = r->gpus;
    axes.global_batch = r->global_batch;
    axes.seq = r->seq; /* cp varies with the sequence (layouts.h) */
    axes.layers = r->n_layer; /* chunks with whole blocks (layouts.h) */
    axes.attention = 1;
    axes.recompute_offload = r->offload;
    axes.base = (plait_cost_layout){.dp = r->gpus, .tp = 1, .pp = 1, .schedule = "1f1b", .chunks = 1, .optim = "adam",
                                    .comm = "tcp"};
    int rc = -1, fits = 0;
    plait_cost_result first, pub;
    /* the planner's first choice: every axis */
    if (plait_cost_axes_parse(&axes, "all") != PLAIT_OK || best_of(&axes, cfg, &x, &first, &fits) != 0) goto out;
    o->first_tokens = first.tokens_per_s;
    layout_text(&first.layout, o->first, sizeof o->first);
    /* the published layout; what the source leaves out, at its best */
    char v[32];
    axes.vary = 0;
    memset(axes.n, 0, sizeof axes.n);
    snprintf(v, sizeof v, "%d", r->dp);
    plait_cost_axes_values(&axes, "dp", v);
    snprintf(v, sizeof v, "%d", r->tp);
    plait_cost_axes_values(&axes, "tp", v);
    snprintf(v, sizeof v, "%d", r->pp);
    plait_cost_axes_values(&axes, "pp", v);
    snprintf(v, sizeof v, "%d", r->cp);
    plait_cost_axes_values(&axes, "cp", v);
    if (r->mb > 0) snprintf(v, sizeof v, "%d", r->mb), plait_cost_axes_values(&axes, "micro_batch", v);
    else axes.vary |= 1u << PLAIT_AXIS_N_MICRO_BATCH;
    if (r->pp > 1) {
        plait_cost_axes_values(&axes, "schedule", strcmp(r->schedule, "-") ? r->schedule : "1f1b,interleaved");
        if (r->chunks > 0) snprintf(v, sizeof v, "%d", r->chunks), plait_cost_axes_values(&axes, "chunks", v);
        else axes.vary |= 1u << PLAIT_AXIS_N_CHUNKS;
    }
    if (strcmp(r->optim, "-")) plait_cost_axes_values(&axes, "optim", r->optim);
    else axes.vary |= 1u << PLAIT_AXIS_N_OPTIM;
    if (strcmp(r->recompute, "-")) plait_cost_axes_values(&axes, "recompute", r->recompute);
    else axes.vary |= 1u << PLAIT_AXIS_N_RECOMPUTE;
    if (strcmp(r->sp, "-")) {
        if (r->tp > 1) plait_cost_axes_values(&axes, "sp", r->sp);
    } else if (r->tp > 1) {
        axes.vary |= 1u << PLAIT_AXIS_N_SP;
    }
    if (best_of(&axes, cfg, &x, &pub, &fits) != 0) goto out;
    layout_text(&pub.layout, o->published, sizeof o->published);
    o->mem_gib = pub.mem.total / 1073741824.0;
    o->limit_gib = plait_cost_mem_limit(&c, r->gpus) / 1073741824.0;
    /* where the source states its memory, plait's count within 10% of it */
    o->fits = fits && (r->memory_gb <= 0 || fabs(pub.mem.total / (r->memory_gb * 1e9) - 1) <= 0.1);
    o->measured = measured_tokens_per_s(r);
    o->predicted = pub.tokens_per_s;
    o->within_15 = fabs(o->predicted / o->measured - 1) <= 0.15;
    double peak = c.peak_bf16; /* the MFU's: the dense bf16 peak */
    o->mfu_measured = 100 * o->measured * model_flops_per_token(r) / (r->gpus * peak);
    o->mfu_predicted = 100 * o->predicted * model_flops_per_token(r) / (r->gpus * peak);
    rc = ckpt_check(r, cfg, &pub.layout, &c);
out:
    if (rc != 0) fprintf(stderr, "%s: the search failed: %s\n", r->name, plait_last_error());
    plait_config_free(cfg);
    return rc;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    plait_host_install();
    char path[1200];
    snprintf(path, sizeof path, "%s/tests/plan/published/runs.tsv", source_dir());
    FILE *in = fopen(path, "r");
    if (!in) {
        fprintf(stderr, "%s: cannot read\n", path);
        return 1;
    }
    FILE *md = argc > 1 ? fopen(argv[1], "w") : NULL;
    FILE *outs[2] = {stdout, md};
    for (int k = 0; k < 2; k++)
        if (outs[k])
            fprintf(outs[k],
                    "| run | GPUs | tp x pp x dp | fits: GiB per GPU (of) | measured tokens/s | predicted for the "
                    "published layout | error | MFU measured / predicted | the planner's first choice | its "
                    "prediction |\n|---|---|---|---|---|---|---|---|---|---|\n");
    char line[4096];
    int lineno = 0, rows = 0, fitting = 0, within = 0, bad = 0, slower = 0;
    double mfu_gap[256];
    while (fgets(line, sizeof line, in)) {
        lineno++;
        if (line[0] == '#' || line[0] == '\n') continue;
        run r;
        if (parse_row(line, &r) != 0) {
            fprintf(stderr,
                    "%s:%d: not a run (27 tab-separated columns, arch gpt or llama, tp x pp x dp x cp = GPUs, a "
                    "measurement)\n",
                    path, lineno);
            bad = 1;
            continue;
        }
        outcome o;
        if (weigh(&r, &o) != 0) {
            bad = 1;
            continue;
        }
        if (rows < 256) mfu_gap[rows] = fabs(o.mfu_predicted - o.mfu_measured);
        rows++;
        fitting += o.fits;
        within += o.within_15;
        /* the search holds every published layout: where it fits, the first
         * choice is at least as fast */
        if (o.fits && o.first_tokens < o.predicted * (1 - 1e-9)) {
            fprintf(stderr,
                    "FAIL: %s: the first choice, %s, is predicted at %.0f tokens/s, below the published "
                    "layout, %s, at %.0f\n",
                    r.name, o.first, o.first_tokens, o.published, o.predicted);
            slower = 1;
        }
        char fit[96];
        snprintf(fit, sizeof fit, "%s: %.1f (%.0f)", o.fits ? "yes" : "**no**", o.mem_gib, o.limit_gib);
        char cp[32] = "";
        if (r.cp > 1) snprintf(cp, sizeof cp, ", cp %d", r.cp);
        if (r.memory_gb > 0) snprintf(fit + strlen(fit), sizeof fit - strlen(fit), ", %.0f GB stated", r.memory_gb);
        for (int k = 0; k < 2; k++)
            if (outs[k])
                fprintf(
                    outs[k],
                    "| %s | %d | %d x %d x %d%s | %s | %.0f | %.0f (%s) | %+.1f%% | %.1f%% / %.1f%% | %s | %.0f |\n",
                    r.name, r.gpus, r.tp, r.pp, r.dp, cp, fit, o.measured, o.predicted, o.published,
                    100 * (o.predicted / o.measured - 1), o.mfu_measured, o.mfu_predicted, o.first, o.first_tokens);
    }
    fclose(in);
    int n = rows < 256 ? rows : 256;
    qsort(mfu_gap, (size_t)n, sizeof *mfu_gap, by_value);
    double median = n ? (n % 2 ? mfu_gap[n / 2] : (mfu_gap[n / 2 - 1] + mfu_gap[n / 2]) / 2) : 0;
    for (int k = 0; k < 2; k++)
        if (outs[k])
            fprintf(outs[k],
                    "\n%d runs. Goals: every published layout fits: %d of %d (%s); the published layout "
                    "predicted within 15%%: %d of %d, %.0f%% (the goal 80%%: %s); the MFU within 5 points: "
                    "the median %.1f points (%s).\n",
                    rows, fitting, rows, fitting == rows ? "met" : "missed", within, rows,
                    rows ? 100.0 * within / rows : 0, rows && within >= 0.8 * rows ? "met" : "missed", median,
                    median <= 5 ? "met" : "missed");
    if (md) fclose(md);
    if (bad || rows == 0) return 1;
    int rc = slower;
    if (fitting < MIN_FITTING)
        fprintf(stderr, "FAIL: %d published layouts fit, fewer than the %d that did\n", fitting, MIN_FITTING), rc = 1;
    if (within < MIN_WITHIN_15)
        fprintf(stderr, "FAIL: %d published layouts predicted within 15%%, fewer than the %d that were\n", within,
                MIN_WITHIN_15),
            rc = 1;
    if (median > MAX_MEDIAN_MFU)
        fprintf(stderr, "FAIL: the median MFU error is %.1f points, more than the %.1f it was\n", median,
                MAX_MEDIAN_MFU),
            rc = 1;
    return rc;
}
