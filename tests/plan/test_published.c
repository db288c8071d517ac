/*
 * `plait plan` against published large-scale training runs
 * (published/runs.tsv: the model, the cluster, the layout, the measured
 * throughput, and where each figure comes from). For every run: the
 * planner's first choice for the same model, batch and GPUs, and its
 * prediction for the published layout (where the source leaves a setting
 * out, the planner's best value for it) beside the measured throughput.
 * A run is a hit when the first choice has the published tensor-parallel
 * size, or the prediction for the published layout is within 20% of the
 * measurement; the goal is 80% of the runs.
 *
 * Prints the table docs/plan.md shows (markdown), and with an argument
 * writes it to that file. Fails below the goal, on a row it cannot read,
 * or when a search fails.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "host/host_table.h"
#include "cost/cluster.h"
#include "cost/search.h"
#include "layout/batch.h"
#include "runtime/error.h"

typedef struct run {
    char name[64], source[512], cluster[64], schedule[16], optim[16], recompute[16], unit[32], note[512];
    int n_layer, n_head, n_embd, vocab, seq, gpus, tp, pp, dp, mb, chunks;
    long long global_batch;
    double measured;
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
    if (k != 21) return -1;
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", f[0]);
    snprintf(r->source, sizeof r->source, "%s", f[1]);
    r->n_layer = atoi(f[2]);
    r->n_head = atoi(f[3]);
    r->n_embd = atoi(f[4]);
    r->vocab = atoi(f[5]);
    r->seq = atoi(f[6]);
    r->gpus = atoi(f[7]);
    snprintf(r->cluster, sizeof r->cluster, "%s", f[8]);
    r->global_batch = atoll(f[9]);
    r->tp = atoi(f[10]);
    r->pp = atoi(f[11]);
    r->dp = atoi(f[12]);
    r->mb = atoi(f[13]);
    snprintf(r->schedule, sizeof r->schedule, "%s", f[14]);
    r->chunks = atoi(f[15]);
    snprintf(r->optim, sizeof r->optim, "%s", f[16]);
    snprintf(r->recompute, sizeof r->recompute, "%s", f[17]);
    r->measured = atof(f[18]);
    snprintf(r->unit, sizeof r->unit, "%s", f[19]);
    snprintf(r->note, sizeof r->note, "%s", f[20]);
    if (r->tp * r->pp * r->dp != r->gpus || r->measured <= 0 || r->global_batch < 1) return -1;
    return 0;
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
    if (!strcmp(r->unit, "tflops_model")) {
        /* 6N + 12 l h s a token, N = 12 l h^2 + 2 V h (an untied output) */
        double N = 12 * l * h * h + 2 * V * h;
        return r->measured * 1e12 * n / (6 * N + 12 * l * h * s);
    }
    return -1;
}

typedef struct loader_ctx {
    char base[1024];
    char over[16][96];
    int n;
} loader_ctx;

static plait_status load(void *ctx, int n, char *const *overrides, plait_config **out) {
    loader_ctx *c = ctx;
    char *all[40];
    int k = 0;
    for (int i = 0; i < c->n; i++) all[k++] = c->over[i];
    for (int i = 0; i < n && k < 40; i++) all[k++] = overrides[i];
    return plait_cli_load_config(c->base, k, all, out);
}

static void layout_text(const plait_cost_layout *l, char *buf, size_t len) { plait_cost_layout_name(l, buf, len); }

typedef struct outcome {
    double measured, predicted, first_tokens;
    int hit, first_tp;
    char first[128], published[128];
} outcome;

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
    snprintf(lc.over[lc.n++], 96, "model.n_layer=%d", r->n_layer);
    snprintf(lc.over[lc.n++], 96, "model.n_head=%d", r->n_head);
    snprintf(lc.over[lc.n++], 96, "model.n_embd=%d", r->n_embd);
    snprintf(lc.over[lc.n++], 96, "model.vocab_size=%d", r->vocab);
    snprintf(lc.over[lc.n++], 96, "model.block_size=%d", r->seq);
    snprintf(lc.over[lc.n++], 96, "data.global_batch=%lld", r->global_batch);
    snprintf(lc.over[lc.n++], 96, "comm.plugin=tcp");
    snprintf(lc.over[lc.n++], 96, "run.log_level=error");
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
    plait_cost_ctx x = {.cluster = &c, .precision = PLAIT_PRECISION_BF16, .hierarchical = 1,
                        .global_batch = r->global_batch, .load = load, .load_ctx = &lc};
    plait_cost_axes axes;
    memset(&axes, 0, sizeof axes);
    axes.ranks = r->gpus;
    axes.global_batch = r->global_batch;
    axes.base = (plait_cost_layout){.dp = r->gpus, .tp = 1, .pp = 1, .schedule = "1f1b", .chunks = 1, .optim = "adam",
                                    .comm = "tcp"};
    int rc = -1, fits = 0;
    plait_cost_result first, pub;
    /* the planner's first choice: every axis */
    if (plait_cost_axes_parse(&axes, "all") != PLAIT_OK || best_of(&axes, cfg, &x, &first, &fits) != 0) goto out;
    o->first_tp = first.layout.tp;
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
    if (best_of(&axes, cfg, &x, &pub, &fits) != 0) goto out;
    layout_text(&pub.layout, o->published, sizeof o->published);
    if (!fits) strncat(o->published, " (over the memory limit here)", sizeof o->published - strlen(o->published) - 1);
    o->measured = measured_tokens_per_s(r);
    o->predicted = pub.tokens_per_s;
    o->hit = o->first_tp == r->tp || fabs(o->predicted / o->measured - 1) <= 0.2;
    rc = 0;
out:
    if (rc != 0) fprintf(stderr, "%s: the search failed: %s\n", r->name, plait_last_error());
    plait_config_free(cfg);
    return rc;
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
            fprintf(outs[k], "| run | GPUs | published tp x pp x dp | measured tokens/s | predicted for the published "
                             "layout | error | the planner's first choice | its prediction | hit |\n"
                             "|---|---|---|---|---|---|---|---|---|\n");
    char line[4096];
    int lineno = 0, rows = 0, hits = 0, bad = 0;
    while (fgets(line, sizeof line, in)) {
        lineno++;
        if (line[0] == '#' || line[0] == '\n') continue;
        run r;
        if (parse_row(line, &r) != 0) {
            fprintf(stderr, "%s:%d: not a run (21 tab-separated columns, tp x pp x dp = GPUs, a measurement)\n", path,
                    lineno);
            bad = 1;
            continue;
        }
        outcome o;
        if (weigh(&r, &o) != 0) {
            bad = 1;
            continue;
        }
        rows++;
        hits += o.hit;
        for (int k = 0; k < 2; k++)
            if (outs[k])
                fprintf(outs[k], "| %s | %d | %d x %d x %d | %.0f | %.0f (%s) | %+.1f%% | %s | %.0f | %s |\n", r.name,
                        r.gpus, r.tp, r.pp, r.dp, o.measured, o.predicted, o.published,
                        100 * (o.predicted / o.measured - 1), o.first, o.first_tokens,
                        o.hit ? (o.first_tp == r.tp ? "tp" : "20%") : "no");
    }
    fclose(in);
    double rate = rows ? (double)hits / rows : 0;
    for (int k = 0; k < 2; k++)
        if (outs[k])
            fprintf(outs[k], "\n%d of %d runs hit (%.0f%%): the published tp chosen, or the published layout "
                             "predicted within 20%%; the goal is 80%%.\n",
                    hits, rows, 100 * rate);
    if (md) fclose(md);
    if (bad || rows == 0) return 1;
    if (rate < 0.8) {
        fprintf(stderr, "FAIL: %d of %d published runs hit, under the 80%% goal\n", hits, rows);
        return 1;
    }
    return 0;
}
