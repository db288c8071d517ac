/* The text table of `plait plan`. */
#include "cost/table.h"

#define MiB 1048576.0

void plait_cost_print_header(FILE *out, const char *config, int ranks, const plait_cluster *c, double mem_limit) {
    double limit = mem_limit > 0 ? mem_limit : plait_cost_mem_limit(c, ranks);
    fprintf(out, "# plait plan %s: %d ranks on %s\n", config, ranks, c->name);
    fprintf(out, "# %d node%s x %d %s, peak %.1f GFLOP/s per %s x efficiency %.2f; intra %s %.1f GB/s %.1f us",
            c->nodes, c->nodes == 1 ? "" : "s", c->units_per_node, c->gpu ? "GPUs" : "cores", c->peak_flops / 1e9,
            c->gpu ? "GPU" : "node", c->efficiency, c->intra.kind, c->intra.bandwidth / 1e9, c->intra.latency * 1e6);
    if (c->nodes > 1)
        fprintf(out, "; inter %s %.1f GB/s %.1f us", c->inter.kind, c->inter.bandwidth / 1e9, c->inter.latency * 1e6);
    fprintf(out, "; memory limit %.0f MiB per rank\n", limit / MiB);
    fprintf(out, "# %-4s %-36s %10s %9s %9s %8s %8s %8s %9s %9s %9s %5s\n", "rank", "layout", "tokens/s", "step_ms",
            "compute", "comm", "idle", "optim", "dp_MB", "tp_MB", "mem_MiB", "fits");
}

size_t plait_cost_print_table(FILE *out, const plait_cost_result *r, size_t n) {
    size_t fit = 0, row = 0;
    for (size_t i = 0; i < n; i++) {
        if (!r[i].valid) continue;
        char name[128];
        plait_cost_layout_name(&r[i].layout, name, sizeof name);
        const plait_cost_time *t = &r[i].time;
        fprintf(out, "  %-4zu %-36s %10.0f %9.1f %9.1f %8.1f %8.1f %8.1f %9.2f %9.2f %9.1f %5s\n", ++row, name,
                r[i].tokens_per_s, 1e3 * t->step, 1e3 * t->compute, 1e3 * t->comm, 1e3 * t->idle, 1e3 * t->optim,
                t->dp_bytes / MiB, t->tp_bytes / MiB, r[i].mem.total / MiB, r[i].fits ? "yes" : "NO");
        fit += r[i].fits != 0;
    }
    for (size_t i = 0; i < n; i++)
        if (r[i].valid && !r[i].fits) {
            char name[128];
            plait_cost_layout_name(&r[i].layout, name, sizeof name);
            fprintf(out, "# does not fit: %s: %s\n", name, r[i].why);
        }
    return fit;
}

size_t plait_cost_print_skipped(FILE *out, const plait_cost_result *r, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (r[i].valid) continue;
        char name[128];
        plait_cost_layout_name(&r[i].layout, name, sizeof name);
        fprintf(out, "# skipped: %s: %s\n", name, r[i].why);
        k++;
    }
    return k;
}
