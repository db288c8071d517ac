/* The text of `plait plan`: the ranking, the families set aside, --explain. */
#include "cost/table.h"

#include <string.h>

#include "device/device.h"

#define MiB 1048576.0
#define GiB (1024.0 * MiB)

/* A compute rate in the unit that shows it: a CPU node's tens of GFLOP/s
 * would read "0.0 TFLOP/s". */
static const char *rate_text(char *buf, size_t size, double flops, int digits) {
    if (flops >= 1e12)
        snprintf(buf, size, "%.*f TFLOP/s", digits, flops / 1e12);
    else
        snprintf(buf, size, "%.*f GFLOP/s", digits, flops / 1e9);
    return buf;
}

void plait_cost_print_header(FILE *out, const char *config, int ranks, const plait_cluster *c, plait_precision p,
                             double mem_limit, const char *memory_for) {
    double limit = mem_limit > 0 ? mem_limit : plait_cost_mem_limit(c, ranks), rate = 0;
    (void)plait_cluster_rate(c, p, &rate);
    fprintf(out, "# plait plan %s: %d ranks on %s, in %s\n", config, ranks, c->name, plait_device_precision_name(p));
    char rt[48];
    fprintf(out, "# %d node%s x %d %s, %s %s per %s (peak x efficiency); intra %s %.1f GB/s %.1f us",
            c->nodes, c->nodes == 1 ? "" : "s", c->units_per_node, c->gpu ? "GPUs" : "cores",
            rate_text(rt, sizeof rt, rate, 1),
            plait_device_precision_name(p), c->gpu ? "GPU" : "node", c->intra.kind, c->intra.bandwidth / 1e9,
            c->intra.latency * 1e6);
    if (!c->gpu && c->half_rows > 0) fprintf(out, "; a rank's rate halves at %.0f rows a micro-batch", c->half_rows);
    if (c->nodes > 1) {
        fprintf(out, "; inter %s %.1f GB/s a rank %.1f us", c->inter.kind, c->inter.bandwidth / 1e9,
                c->inter.latency * 1e6);
        if (c->inter_node_bandwidth > 0) fprintf(out, ", %.0f GB/s a node", c->inter_node_bandwidth / 1e9);
    }
    fprintf(out, "; memory limit %.0f MiB per rank\n", limit / MiB);
    if (c->node_ranks) {
        int islands = 0;
        for (int r = 0; r < c->node_ranks; r++) {
            int first = c->node_site[r].island >= 0;
            for (int q = 0; q < r && first; q++) first = c->node_site[q].island != c->node_site[r].island;
            islands += first;
        }
        fprintf(out,
                "# node topology %s: %d GPUs in %d NVLink island%s, placed as plait places a node's ranks; a node's "
                "groups that leave an island: %s %.1f GB/s %.1f us\n",
                c->topology, c->node_ranks, islands, islands == 1 ? "" : "s", c->cross.kind, c->cross.bandwidth / 1e9,
                c->cross.latency * 1e6);
    }
    if (memory_for) fprintf(out, "# %s\n", memory_for);
}

size_t plait_cost_print_table(FILE *out, const plait_cost_result *r, size_t n) {
    /* the layout column as wide as its longest name (a pipeline's schedule,
     * virtual stages, recompute and bucket make names of 50 characters and
     * more), so that every row's numbers stand under their heading */
    int width = 44;
    for (size_t i = 0; i < n; i++) {
        char name[128];
        if (!r[i].valid) continue;
        plait_cost_layout_name_every(&r[i].layout, name, sizeof name);
        if ((int)strlen(name) > width) width = (int)strlen(name);
    }
    fprintf(out, "# %-4s %-*s %10s %10s %10s %9s %9s %8s %9s %9s %9s %5s\n", "rank", width, "layout", "tokens/s",
            "step_ms", "compute", "comm", "idle", "optim", "dp_MB", "tp_MB", "mem_MiB", "fits");
    size_t fit = 0, row = 0;
    for (size_t i = 0; i < n; i++) {
        if (!r[i].valid) continue;
        char name[128];
        plait_cost_layout_name_every(&r[i].layout, name, sizeof name);
        const plait_cost_time *t = &r[i].time;
        fprintf(out, "  %-4zu %-*s %10.0f %10.1f %10.1f %9.1f %9.1f %8.1f %9.2f %9.2f %9.1f %5s\n", ++row, width, name,
                r[i].tokens_per_s, 1e3 * t->step, 1e3 * t->compute, 1e3 * t->comm, 1e3 * t->idle, 1e3 * t->optim,
                t->dp_bytes / MiB, t->tp_bytes / MiB, r[i].mem.total / MiB, r[i].fits ? "yes" : "NO");
        fit += r[i].fits != 0;
    }
    for (size_t i = 0; i < n; i++)
        if (r[i].valid && !r[i].fits) {
            char name[128];
            plait_cost_layout_name_every(&r[i].layout, name, sizeof name);
            fprintf(out, "# does not fit: %s: %s\n", name, r[i].why);
        }
    return fit;
}

size_t plait_cost_print_families(FILE *out, const plait_cost_family *f, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        fprintf(out, "# %s: %s (%zu layout%s): %s\n", f[i].over_memory ? "does not fit" : "skipped", f[i].name,
                f[i].layouts, f[i].layouts == 1 ? "" : "s", f[i].why);
        k += f[i].layouts;
    }
    return k;
}

void plait_cost_print_search(FILE *out, const plait_cost_search *s) {
    fprintf(out,
            "# searched %zu layouts in %.2f s: %zu set aside by the rules above, %zu weighed from the model's shape "
            "(%zu fit), %zu checked against their plugin's plan (%zu of them over the memory limit by the plan's count)\n",
            s->candidates, s->seconds, s->refused, s->weighed, s->fitting, s->confirmed, s->over_in_plan);
    if (s->shape_only)
        fprintf(out,
                "# %zu of the rows are ranked by the model's shape alone, not checked against their plugin's plan "
                "(the best %d are; --explain checks any one)\n",
                s->shape_only, PLAIT_COST_CONFIRM);
}

/* The ring attention's line of --explain (cp > 1): its transfers, the
 * type K and V take on the wire, and what the attention does not hide. */
static void print_cp(FILE *out, const plait_cost_layout *l, const plait_cost_rank *bs, const plait_cost_time *t) {
    if (l->cp <= 1) return;
    fprintf(out,
            "  CP  %d ranks on %s, ring attention: %.0f transfers of %.2f MiB (this rank's K and V, %s on the wire; "
            "the backward's also dK and dV, float32): %.4f s, of which %.4f s not hidden by the attention of the "
            "block each pass computes, on the critical path\n",
            l->cp, t->cp_link ? t->cp_link : "-", 3 * bs->cp_passes + bs->cp_tail_msgs,
            t->cp_kv_bytes * bs->cp_msg_elems / MiB, t->cp_kv_bytes == 2 ? "bf16" : "float32", t->cp_total, t->cp_s);
}

/* ZeRO-1/2 as a distributed optimizer (plait_cost_memory's rule): the
 * weights' line says their float32 masters are sharded. */
static const char *masters_note(const plait_cost_layout *l, const plait_cost_ctx *x, const plait_cost_rank *ms, int z) {
    int distributed = (z == 1 || z == 2) && plait_cost_layout_cp(l) * l->dp > 1 && ms->master_numel > 0 &&
                      !(x->whole_masters & (1 << z));
    return distributed ? "; their float32 masters / dp alone ([optim.zeroN] master: a distributed optimizer)" : "";
}

/* --explain's all-to-all line of a layout with ep > 1. */
static void print_ep(FILE *out, const plait_cost_layout *l, const plait_cost_rank *bs, const plait_cost_time *t) {
    if (l->ep > 1)
        fprintf(out,
                "  EP  %d ranks on %s, all-to-all: %.0f exchanges (dispatch and combine, forward and backward) of "
                "%.0f bytes a rank sends in all, the routes spread evenly: %.4f s on the critical path; the "
                "experts' gradients reduced over edp = %d ranks\n",
                l->ep, t->ep_link ? t->ep_link : "-", bs->ep_msgs, t->ep_bytes, t->ep_s,
                l->dp * plait_cost_layout_cp(l) / l->ep);
}

/* --explain's memory of the rank needing the most, by category. */
static void print_memory(FILE *out, const plait_cost_result *r, const plait_cost_rank *stages, const plait_cost_ctx *x,
                         const plait_cost_bytes *bp) {
    const plait_cost_layout *l = &r->layout;
    const plait_cluster *c = x->cluster;
    const plait_cost_bytes b = *bp;
    const plait_cost_mem *m = &r->mem;
    double limit = x->mem_limit > 0 ? x->mem_limit : plait_cost_mem_limit(c, plait_cost_layout_ranks(l));
    int z = plait_cost_zero_stage(l->optim);
    /* the total in the table's unit too, so that a row and its explanation compare digit for digit */
    fprintf(out, "\nmemory of the rank needing the most: %.2f GiB (%.1f MiB) of %.2f GiB%s%s\n", m->total / GiB,
            m->total / MiB, limit / GiB, r->fits ? "" : " -- does not fit: ", r->fits ? "" : r->why);
    const plait_cost_rank *ms = &stages[r->mem_stage]; /* the rank needing the most */
    char copy[128] = "";
    if (ms->bf16 && z >= 3 && ms->largest_tied_copy_numel > 0) /* the rest gathered in bf16 (model/model.h) */
        snprintf(copy, sizeof copy, "; + the bf16 copy of a tied head while it runs, 2 bytes each of %.4g weights",
                 ms->largest_tied_copy_numel);
    else if (ms->bf16 && z >= 3) snprintf(copy, sizeof copy, "; the products' weights gathered in bf16, no copy");
    else if (ms->bf16)
        snprintf(copy, sizeof copy, "; + the products' bf16 copy, 2 bytes each of %.4g weights", ms->weight_copy_numel);
    fprintf(out, "  weights     %10.2f GiB  (%.0f bytes a parameter, float32%s%s%s)\n", m->param / GiB, b.weight,
            z >= 3 ? ", / dp by ZeRO-3" : "", copy, masters_note(l, x, ms, z));
    if (z == 1 && x->grad_accum16 && stages[0].micro_batches > 1) /* plait_cost_memory's rule */
        fprintf(out,
                "  gradients   %10.2f GiB  (2 bytes a parameter, bf16: the running sum over the micro-batches "
                "([optim.zero1] grad_accum = bf16), %s)\n",
                m->grad / GiB,
                x->offload ? "+ 4 bytes / dp, float32: the slices the offload store reads"
                           : "whose buffer holds the bf16 slices the optimizer reads");
    else if (z == 1 && x->grad_accum16)
        fprintf(out,
                "  gradients   %10.2f GiB  (%s / dp: the slices the optimizer reads ([optim.zero1] grad_accum = "
                "bf16); one micro-batch a step, no running sum)\n",
                m->grad / GiB, x->offload ? "4 bytes, float32 (the offload store's)," : "2 bytes, bf16,");
    else
        fprintf(out, "  gradients   %10.2f GiB  (%.0f bytes, float32%s)\n", m->grad / GiB, b.grad,
                z >= 2 ? ", / dp by ZeRO-2" : "");
    fprintf(out, "  optimizer   %10.2f GiB  (%.0f bytes: Adam's moments%s%s)\n", m->state / GiB,
            x->moments16 ? b.optim / 2 : b.optim, x->moments16 ? ", bf16 ([optim] moments = bf16)" : ", float32",
            z >= 1 ? ", / dp by ZeRO" : "");
    fprintf(out, "  activations %10.2f GiB  (%s, recompute %s, %d micro-batch%s a step of %lld sequences)\n",
            m->activations / GiB, ms->bf16 ? "bf16 where the products read and write them" : "float32",
            plait_cost_recompute_name(l->recompute), stages[0].micro_batches, stages[0].micro_batches == 1 ? "" : "es",
            (long long)l->micro_batch);
    fprintf(out, "  buffers     %10.2f GiB  (collective scratch%s%s)\n", m->buffers / GiB,
            z > 0 && l->dp > 1 ? ", ZeRO's working buffers" : "",
            x->deterministic && stages[0].micro_batches > 1 ? ", the deterministic summation tree" : "");
    fprintf(out, "  process     %10.2f GiB\n", m->process / GiB);
    if (m->host_state > 0 || m->disk > 0)
        fprintf(out, "  offloaded   %10.2f GiB of host memory, %.2f GiB on disk ([optim] offload; not in the total)\n",
                m->host_state / GiB, m->disk / GiB);
    if (m->host_activations > 0)
        fprintf(out,
                "  offloaded   %10.2f GiB of host memory, the blocks' kept inputs ([model] recompute_offload; not in "
                "the total)\n",
                m->host_activations / GiB);
}

const char *plait_cost_dp_overlap_text(char *buf, size_t cap, const plait_cost_time *t) {
    int n = snprintf(buf, cap, "%.4f s behind the backward pass%s", t->dp_hidden,
                     t->dp_hidden > t->dp_window ? " (more than it hides)" : "");
    if (t->dp_ahead > 0 && n > 0 && (size_t)n < cap)
        snprintf(buf + n, cap - (size_t)n, ", %.4f s beside the next step's forward (overlap_param_gather%s)",
                 t->dp_ahead, t->dp_ahead > t->dp_ahead_window ? ", more than it hides" : "");
    return buf;
}

/* The DP line of --explain: the group's collectives, where they run and
 * what of them the step waits for (plait_cost_time's dp_*), naming the
 * key that exposes them where one does. */
static void print_dp(FILE *out, const plait_cost_layout *l, const plait_cost_ctx *x, const plait_cost_time *t) {
    char overlap[320];
    if (l->dp * plait_cost_layout_cp(l) > 1)
        fprintf(out,
                "  DP  %d ranks, %s (%.2f MiB a rank sends, %s%s%s): %.4f s on the intra-node link, %.4f s on the "
                "network; %s, %.4f s exposed (%s)\n",
                l->dp * plait_cost_layout_cp(l), l->optim, t->dp_bytes / MiB, "fp32 gradients",
                t->dp_hierarchical ? ", hierarchical across nodes" : "",
                x->deterministic ? ", the reductions ordered and flat ([run] deterministic)" : "", t->dp_intra,
                t->dp_inter, plait_cost_dp_overlap_text(overlap, sizeof overlap, t), t->dp_exposed,
                plait_cost_zero_stage(l->optim) == 0 && x->dp_serial ? "every bucket: [parallel.dp] overlap = false"
                : plait_cost_zero_stage(l->optim) == 3 && x->zero3_gathered == 1
                    ? "the last bucket and every layer's gathers: [optim.zero3] prefetch_layers = 0"
                : plait_cost_zero_stage(l->optim) == 3 ? "the last bucket, the first layer's gather"
                : t->dp_ahead > 0                      ? "the last bucket, the updated weights' first unit's all-gather"
                : plait_cost_zero_stage(l->optim) > 0  ? "the last bucket, the updated weights' all-gather"
                                                       : "the last bucket");
    else fprintf(out, "  DP  none (dp 1)\n");
}

void plait_cost_print_explain(FILE *out, const plait_cost_result *r, const plait_cost_rank *stages,
                              const plait_cost_ctx *x, const char *memory_for) {
    const plait_cost_layout *l = &r->layout;
    const plait_cost_time *t = &r->time;
    const plait_cluster *c = x->cluster;
    char name[128];
    plait_cost_layout_name_every(l, name, sizeof name);
    const char *pn = plait_device_precision_name(x->precision);
    fprintf(out, "# plait plan --explain %s: %d ranks on %s, in %s\n", name, plait_cost_layout_ranks(l), c->name, pn);
    if (memory_for) fprintf(out, "# %s\n", memory_for);
    fprintf(out, "step %.3f s = compute %.3f + communication not hidden %.3f + bubble %.3f + optimizer %.3f s: %.0f "
                 "tokens/s (%.0f tokens a step)\n",
            t->step, t->compute, t->comm, t->idle, t->optim, r->tokens_per_s, r->tokens_per_step);
    if (t->shared_cores)
        fprintf(out, "  the ranks share a CPU node's cores, each on its own threads: the node's work or the busiest "
                     "stage sets the pace, and a pipeline's bubble costs what the busy ranks cannot take of the idle "
                     "ones' cores; DP's copies run on the same cores, so none hides behind the backward pass\n");
    if (!c->gpu && c->half_rows > 0)
        fprintf(out, "  at %.0f rows a micro-batch a rank computes at %.0f%% of its rate (half of it at %.0f rows)\n",
                stages[0].rows, 100 * stages[0].rows / (stages[0].rows + c->half_rows), c->half_rows);
    if (!c->gpu && t->stream > 0)
        fprintf(out, "  each micro-batch streams a rank's weights from memory 3 times (forward, input and weight "
                     "gradients) at the node's %.0f GB/s: %.4f s a step of the busiest stage alone\n",
                c->memory_bandwidth / 1e9, t->stream);
    char rt[48];
    fprintf(out, "\ncompute at %s per %s (%s peak x efficiency)%s:\n", rate_text(rt, sizeof rt, t->rate, 2),
            c->gpu ? "GPU" : "node", pn, c->gpu ? "" : ", shared by the node's ranks");
    if (t->attention_rate > 0 && stages[t->busiest].attention_flops > 0) {
        char ar[48];
        const plait_cost_rank *b = &stages[t->busiest];
        fprintf(out,
                "  its fused attention at %s ([node] %s%sattention_efficiency): %.4g of the busiest stage's %.4g "
                "TFLOP, %.4f s\n",
                rate_text(ar, sizeof ar, t->attention_rate, 2), x->precision == PLAIT_PRECISION_FP32 ? "" : pn,
                x->precision == PLAIT_PRECISION_FP32 ? "" : "_", b->attention_flops / 1e12, b->flops / 1e12,
                b->attention_flops / t->attention_rate);
    }
    fprintf(out, "  %-6s %12s %14s %12s %12s %9s  %s\n", "stage", "params/rank", "TFLOP/step", "compute_s",
            "recompute_s", "bubble", "layers");
    /* a CPU stage's compute as a rank alone on its threads, at its rows */
    double alone = t->rate;
    if (!c->gpu) {
        alone = t->rate / c->units_per_node * plait_cluster_rank_threads(c, plait_cost_layout_ranks(l), x->threads);
        if (c->half_rows > 0 && stages[0].rows > 0) alone *= stages[0].rows / (stages[0].rows + c->half_rows);
    }
    for (int s = 0; s < l->pp; s++) {
        const plait_cost_rank *st = &stages[s];
        /* a deep pipeline: its first and last stages, the busiest, and a note */
        if (l->pp > 12 && s >= 3 && s < l->pp - 3 && s != t->busiest) {
            if (s == 3) fprintf(out, "  ... (stages 3 to %d as their neighbours)\n", l->pp - 4);
            continue;
        }
        double cs = plait_cost_compute_s(c, t, alone, st, 0), rs = plait_cost_compute_s(c, t, alone, st, 1);
        fprintf(out, "  %-6d %12.4g %14.4g %12.4f %12.4f %8.1f%%  %s%s%s\n", s, st->param_numel, st->flops / 1e12, cs,
                rs, 100 * st->bubble, st->layers[0] ? st->layers : "-", st->layers_cut ? ",..." : "",
                s == t->busiest ? "  <- sets the pace" : "");
    }
    fprintf(out, "\ncommunication of the busiest stage (%d):\n", t->busiest);
    plait_cost_bytes b;
    plait_cost_bytes_of(&b);
    const plait_cost_rank *bs = &stages[t->busiest];
    double msg = t->wire_bytes > 0 ? t->wire_bytes : bs->msg_bytes > 0 ? bs->msg_bytes : b.message;
    const char *dtype = msg < 4 ? "bf16" : "float32";
    if (l->tp > 1 && t->tp_hidden > 0) {
        const double sums = bs->tp_hide_msgs - bs->tp_hide_gathers;
        fprintf(out,
                "  TP  %d ranks on %s: %.0f %s of %.2f MiB (%s on the wire): %.4f s on the critical path; %.4f s more "
                "behind products ([parallel.tp] overlap: the input-gradient sums, %.0f %s, beside the "
                "column-parallel products' weight gradients",
                l->tp, t->tp_link, bs->tp_msgs,
                bs->sp ? "all-gather + reduce-scatter pairs (sequence parallelism)" : "all-reduces",
                msg * bs->tp_msg_elems / MiB, dtype, t->tp_s, t->tp_hidden, bs->sp ? 2 * sums : sums,
                bs->sp ? "reduce-scatters" : "all-reduces");
        if (bs->tp_hide_gathers > 0)
            fprintf(out, "; the norms' outputs gathered again, %.0f all-gathers, beside the gradients before them",
                    2 * bs->tp_hide_gathers);
        fprintf(out, ")\n");
    } else if (l->tp > 1)
        fprintf(out, "  TP  %d ranks on %s: %.0f %s of %.2f MiB (%s on the wire): %.4f s, all on the critical path\n",
                l->tp, t->tp_link, bs->tp_msgs,
                bs->sp ? "all-gather + reduce-scatter pairs (sequence parallelism)" : "all-reduces",
                msg * bs->tp_msg_elems / MiB, dtype, t->tp_s);
    else
        fprintf(out, "  TP  none (tp 1)\n");
    if (l->pp > 1)
        fprintf(out, "  PP  %.0f sends of %.2f MiB (%s) on %s: %.4f s on the critical path\n", bs->pp_msgs,
                msg * bs->pp_msg_elems / MiB, dtype, t->pp_link, t->pp_s);
    else
        fprintf(out, "  PP  none (pp 1)\n");
    print_cp(out, l, bs, t);
    print_ep(out, l, bs, t);
    if (t->offload_s > 0)
        fprintf(out,
                "  OFF the blocks' kept inputs to host memory and back ([model] recompute_offload): %.2f GiB a step "
                "at the cluster's host_bandwidth, %.4f s on the critical path\n",
                t->offload_bytes / GiB, t->offload_s);
    print_dp(out, l, x, t);
    fprintf(out, "\nbubble: %s, the busiest stage idles %.1f%% of its span: %.4f s\n",
            l->pp > 1 ? l->schedule : "no pipeline", 100 * t->bubble, t->idle);
    fprintf(out, "optimizer: AdamW moves %.0f bytes per parameter a rank owns%s at %.0f GB/s: %.4f s\n",
            plait_cost_adam_io(x->moments16),
            !bs->bf16 ? ""
            : plait_cost_zero_stage(l->optim) >= 3
                ? ", the bf16 copy of the weights 6 bytes an element at each forward and backward (ZeRO-3)"
                : ", the bf16 copy of the weights 6 bytes an element",
            c->memory_bandwidth / 1e9, t->optim);
    print_memory(out, r, stages, x, &b);
    fprintf(out, "%s\n", r->confirmed ? "(figures from the parallel plugin's plan of each stage)"
                                      : "(figures from the model's shape alone)");
}
