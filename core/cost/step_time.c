/* Step time: compute, alpha-beta communication, pipeline bubble, overlap. */
#include "cost/cost.h"

#include <string.h>

double plait_cost_allreduce_s(const plait_link *l, int n, double bytes) {
    if (n <= 1) return 0;
    return 2.0 * (n - 1) * (l->latency + bytes / n / l->bandwidth);
}

double plait_cost_gather_s(const plait_link *l, int n, double bytes) {
    if (n <= 1) return 0;
    return (n - 1) * (l->latency + bytes / n / l->bandwidth);
}

double plait_cost_p2p_s(const plait_link *l, double bytes) { return l->latency + bytes / l->bandwidth; }

double plait_cost_bubble(int p, int m, int v) {
    if (p <= 1 || m < 1) return 0;
    if (v < 1) v = 1;
    return (double)(p - 1) / ((double)v * m + p - 1);
}

/* Bytes of gradient this rank reduces over DP, and how the optimizer moves
 * them: plain DP all-reduces 4Ψ; ZeRO-1/2 reduce-scatter 4Ψ and all-gather
 * the updated 4Ψ; ZeRO-3 all-gathers the parameters for the forward and
 * again for the backward pass and reduce-scatters the gradients (1.5x).
 * Compression scales the gradients' bytes (g) and ZeRO-3's gathers (w);
 * ZeRO-1/2 gather the updated parameters in float32. */
static void dp_times(const plait_cost_rank *r, int zero_stage, double bucket_bytes, const plait_link *l,
                     double *hidden_s, double *exposed_s, double *bytes) {
    double S = 4 * r->param_numel, g = r->grad_wire > 0 ? r->grad_wire : 1, w = r->param_wire > 0 ? r->param_wire : 1;
    int n = r->dp;
    *hidden_s = *exposed_s = *bytes = 0;
    if (n <= 1) return;
    double last = S < bucket_bytes ? S : bucket_bytes;
    if (zero_stage == 0) {
        *hidden_s = plait_cost_allreduce_s(l, n, g * (S - last));
        *exposed_s = plait_cost_allreduce_s(l, n, g * last);
        *bytes = 2.0 * (n - 1) / n * S * g;
    } else if (zero_stage < 3) {
        *hidden_s = plait_cost_gather_s(l, n, g * (S - last));
        *exposed_s = plait_cost_gather_s(l, n, g * last) + plait_cost_gather_s(l, n, S);
        *bytes = (n - 1.0) / n * S * (g + 1);
    } else {
        double U = 4 * r->largest_layer_numel;
        *hidden_s = 2 * plait_cost_gather_s(l, n, w * S) + plait_cost_gather_s(l, n, g * S) -
                    plait_cost_gather_s(l, n, w * U);
        *exposed_s = plait_cost_gather_s(l, n, w * U);
        *bytes = (n - 1.0) / n * S * (2 * w + g);
    }
}

void plait_cost_step_time(const plait_cost_rank *ranks, int n, int zero_stage, double bucket_bytes,
                          const plait_cluster *c, plait_cost_time *out) {
    memset(out, 0, sizeof *out);
    if (n < 1) return;
    int per_node = plait_cluster_ranks_per_node(c, n);
    int units = c->units_per_node > 0 ? c->units_per_node : 1;
    /* a rank's compute rate when it runs alone on its share of the node
     * (its math threads: units / ranks on the node, at least one), and the
     * node's whole rate, which its busy ranks share */
    double unit_rate = c->gpu ? c->peak_flops : c->peak_flops / units;
    double node_rate = unit_rate * units;
    int threads = c->gpu ? 1 : (units / per_node > 1 ? units / per_node : 1);
    double alone = unit_rate * threads * c->efficiency;
    const plait_cost_rank *r0 = &ranks[0];
    int tp = r0->tp, dp = r0->dp;
    const plait_link *tp_link = plait_cluster_link(c, n, tp, 1);
    const plait_link *dp_link = plait_cluster_link(c, n, dp, tp);
    const plait_link *pp_link = plait_cluster_link(c, n, r0->pp, tp * dp);

    double crit = 0, busiest = 0, comm_crit = 0, node_work_max = 0, comm_max = 0, opt_max = 0;
    double dp_hidden = 0, dp_exposed = 0;
    int nodes = (n + per_node - 1) / per_node;
    for (int node = 0; node < nodes; node++) {
        double work = 0, opt_bytes = 0;
        for (int i = node * per_node; i < n && i < (node + 1) * per_node; i++) {
            work += ranks[i].flops;
            double owned = ranks[i].param_numel / (zero_stage > 0 ? ranks[i].dp : 1);
            opt_bytes += 28.0 * owned; /* AdamW reads p, g, m, v and writes p, m, v: 7 floats */
        }
        double t = work / (node_rate * c->efficiency);
        if (t > node_work_max) node_work_max = t;
        /* a GPU node's memory bandwidth is per GPU, a CPU node's is shared */
        double opt = c->gpu ? opt_bytes / per_node / c->memory_bandwidth : opt_bytes / c->memory_bandwidth;
        if (opt > opt_max) opt_max = opt;
    }
    for (int i = 0; i < n; i++) {
        const plait_cost_rank *r = &ranks[i];
        double compute = r->flops / alone;
        double tp_s = r->tp_msgs * plait_cost_allreduce_s(tp_link, r->tp, r->tp_msg_bytes);
        double pp_s = r->pp_msgs * plait_cost_p2p_s(pp_link, r->pp_msg_bytes);
        double busy = compute + tp_s + pp_s;
        double span = busy / (1 - r->bubble);
        if (span > crit) {
            crit = span;
            busiest = compute;
            comm_crit = tp_s + pp_s;
        }
        if (tp_s + pp_s > comm_max) comm_max = tp_s + pp_s;
        double h, e, b;
        dp_times(r, zero_stage, bucket_bytes, dp_link, &h, &e, &b);
        if (h + e > dp_hidden + dp_exposed) {
            dp_hidden = h;
            dp_exposed = e;
        }
        if (b > out->dp_bytes) out->dp_bytes = b;
        if (r->tp_msgs * r->tp_msg_bytes > out->tp_bytes) out->tp_bytes = r->tp_msgs * r->tp_msg_bytes;
        if (r->pp_msgs * r->pp_msg_bytes > out->pp_bytes) out->pp_bytes = r->pp_msgs * r->pp_msg_bytes;
    }
    /* ranks sharing cores cannot do more work per second than the node:
     * then the node's total work (plus the communication on the critical
     * path) sets the pace, and a pipeline's idle ranks lend their cores to
     * the busy ones */
    double fwd_bwd = crit;
    double shared = node_work_max + comm_max;
    if (shared > fwd_bwd) {
        fwd_bwd = shared;
        out->compute = node_work_max;
        out->comm = comm_max;
        out->idle = 0;
    } else {
        out->compute = busiest;
        out->comm = comm_crit;
        out->idle = crit - busiest - comm_crit;
    }
    /* the reduction of all buckets but the last hides behind the backward
     * pass (two thirds of the compute) */
    double backward = 2.0 / 3.0 * out->compute;
    double exposed = dp_exposed + (dp_hidden > backward ? dp_hidden - backward : 0);
    out->comm += exposed;
    out->optim = opt_max;
    out->step = fwd_bwd + exposed + opt_max;
}
