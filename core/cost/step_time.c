/* Step time: compute, alpha-beta communication on the cluster's links, pipeline bubble, overlap. */
#include "cost/cost.h"

#include <string.h>

#include "layout/mesh.h"

double plait_cost_allreduce_bw_s(double latency, double bandwidth, int n, double bytes) {
    if (n <= 1) return 0;
    return 2.0 * (n - 1) * (latency + bytes / n / bandwidth);
}

double plait_cost_gather_bw_s(double latency, double bandwidth, int n, double bytes) {
    if (n <= 1) return 0;
    return (n - 1) * (latency + bytes / n / bandwidth);
}

double plait_cost_allreduce_s(const plait_link *l, int n, double bytes) {
    return plait_cost_allreduce_bw_s(l->latency, l->bandwidth, n, bytes);
}

double plait_cost_gather_s(const plait_link *l, int n, double bytes) {
    return plait_cost_gather_bw_s(l->latency, l->bandwidth, n, bytes);
}

double plait_cost_p2p_s(const plait_link *l, double bytes) { return l->latency + bytes / l->bandwidth; }

double plait_cost_bubble(const char *schedule, int p, int m, int v) {
    if (p <= 1 || m < 1) return 0;
    if (v < 1) v = 1;
    double P = p, M = m, V = v;
    if (schedule && strcmp(schedule, "zb1") == 0)
        return m >= p ? (P - 1) / (3 * M + P - 1) : (2 * P - M - 1) / (2 * M + 2 * P - 1);
    if (v == 1) return (P - 1) / (M + P - 1);
    return m >= p ? (P - 1) / (V * M + P - 1) : (V * (P - M) + M - 1) / (V * P + M - 1);
}

/* How a group of `size` ranks whose members are `stride` world ranks apart
 * talks: within a node on the intra link (the cross link between NVLink
 * islands of a node whose topology is given); across nodes each member of a
 * node is one of `per_node` ranks using the network at once. */
typedef struct route {
    const plait_link *link;
    double bandwidth;   /* what one rank gets on it */
    int local, nodes;   /* members per node, nodes spanned (hierarchical) */
} route;

static route route_of(const plait_cluster *c, int world, int size, int stride) {
    int per_node = plait_cluster_ranks_per_node(c, world);
    route r = {.link = plait_cluster_link(c, world, size, stride), .local = size, .nodes = 1};
    if (r.link != &c->inter) { /* within a node: intra, or cross between NVLink islands */
        r.bandwidth = r.link->bandwidth;
        return r;
    }
    r.bandwidth = plait_cluster_inter_share(c, per_node);
    r.local = stride < per_node ? per_node / stride : 1;
    if (r.local > size) r.local = size;
    if (r.local < 1 || size % r.local != 0) r.local = 1;
    r.nodes = size / r.local;
    return r;
}

/* A group of two nested axes whose strides make no one stride (an order
 * that puts another axis between dp and cp): size_a members stride_a
 * apart, each repeated size_b times stride_b apart. Its members on a
 * node are counted one by one (the group of rank 0's; every node is like
 * it), and it takes the network where they span nodes. */
static route route_two(const plait_cluster *c, int world, int size_a, int stride_a, int size_b, int stride_b) {
    int per_node = plait_cluster_ranks_per_node(c, world), size = size_a * size_b, local = 0;
    for (int b = 0; b < size_b; b++)
        for (int a = 0; a < size_a; a++) local += (long)a * stride_a + (long)b * stride_b < per_node;
    if (c->nodes <= 1 || local >= size) {
        int crosses = plait_cluster_group_crosses(c, size_a, stride_a) ||
                      plait_cluster_group_crosses(c, size_b, stride_b);
        const plait_link *l = crosses ? &c->cross : &c->intra;
        return (route){.link = l, .bandwidth = l->bandwidth, .local = size, .nodes = 1};
    }
    if (local < 1 || size % local) local = 1;
    return (route){.link = &c->inter,
                   .bandwidth = plait_cluster_inter_share(c, per_node),
                   .local = local,
                   .nodes = size / local};
}

/* Where each group of a job's ranks sits: the stride of each axis (the
 * product of the sizes inside it in [parallel] order, PLAIT_AXIS_*
 * indexed; by default tp, cp, dp, pp innermost first) and the routes of
 * the groups: tp, cp, pp, the DP group (dp x cp), ep (the innermost ep of
 * the DP group) and the expert-data group (the DP group's ranks with one
 * ep rank). */
typedef struct placement {
    int stride[PLAIT_MESH_AXES];
    route tp, cp, pp, dp, ep, edp;
} placement;

static void place(const plait_cluster *c, const plait_cost_job *j, int world, placement *p) {
    const int cp = j->cp > 1 ? j->cp : 1, ep = j->ep > 1 && j->dp * cp % j->ep == 0 ? j->ep : 1;
    int size[PLAIT_MESH_AXES], axes[PLAIT_MESH_AXES] = {PLAIT_AXIS_TP, PLAIT_AXIS_CP, PLAIT_AXIS_DP, PLAIT_AXIS_PP};
    size[PLAIT_AXIS_DP] = j->dp, size[PLAIT_AXIS_TP] = j->tp, size[PLAIT_AXIS_PP] = j->pp, size[PLAIT_AXIS_CP] = cp;
    if (j->axes[0] || j->axes[1] || j->axes[2] || j->axes[3]) memcpy(axes, j->axes, sizeof axes);
    for (int i = 0, s = 1; i < PLAIT_MESH_AXES; s *= size[axes[i]], i++) p->stride[axes[i]] = s;
    p->tp = route_of(c, world, j->tp, p->stride[PLAIT_AXIS_TP]);
    p->cp = route_of(c, world, cp, p->stride[PLAIT_AXIS_CP]);
    p->pp = route_of(c, world, j->pp, p->stride[PLAIT_AXIS_PP]);
    /* the DP group: dp and cp, the inner of the two first */
    int in = p->stride[PLAIT_AXIS_DP] <= p->stride[PLAIT_AXIS_CP] ? PLAIT_AXIS_DP : PLAIT_AXIS_CP;
    int out = in == PLAIT_AXIS_DP ? PLAIT_AXIS_CP : PLAIT_AXIS_DP, si = p->stride[in], n = j->dp * cp;
    int one = size[out] == 1 || p->stride[out] == si * size[in]; /* one stride */
    p->dp = one ? route_of(c, world, n, si) : route_two(c, world, size[in], si, size[out], p->stride[out]);
    p->ep = route_of(c, world, ep, si);
    p->edp = one || size[in] % ep ? route_of(c, world, n / ep, si * ep)
                                  : route_two(c, world, size[in] / ep, si * ep, size[out], p->stride[out]);
}

/* Collectives of the DP group: flat rings on its route, or, across nodes
 * with a hierarchical comm plugin, a reduce-scatter inside each node, the
 * inter-node step on 1/local of the bytes, and an all-gather inside. A
 * collective of `bytes` cut into `parts` (buckets, layers) pays the ring's
 * latency once a part. Each adds its time on each link to intra/inter. */
typedef struct dp_net {
    const plait_cluster *c;
    route r;
    int n, hier;
    int ordered;         /* [run] deterministic: the reductions run the ordered algorithm, each
                  * rank sending every owner its piece directly (coll/coll_ordered.c):
                  * the ring's bytes, never hierarchical */
    double intra, inter; /* seconds on each link so far */
} dp_net;

static double ring(double latency, double bandwidth, int n, double bytes, double parts) {
    if (n <= 1) return 0;
    return (n - 1) * (parts * latency + bytes / n / bandwidth);
}

/* `times` collectives of `bytes` each. */
static double dp_gathers(dp_net *d, double bytes, double parts, double times) {
    const plait_link *in = d->r.link != &d->c->inter ? d->r.link : &d->c->intra, *out = &d->c->inter;
    if (parts < 1) parts = 1;
    if (d->r.link == in || d->n <= 1) {
        double t = times * ring(in->latency, in->bandwidth, d->n, bytes, parts);
        d->intra += t;
        return t;
    }
    if (d->hier && d->r.local > 1) {
        double a = times * ring(in->latency, in->bandwidth, d->r.local, bytes, parts);
        double b = times * ring(out->latency, d->r.bandwidth, d->r.nodes, bytes / d->r.local, parts);
        d->intra += a;
        d->inter += b;
        return a + b;
    }
    double t = times * ring(out->latency, d->r.bandwidth, d->n, bytes, parts);
    d->inter += t;
    return t;
}

static double dp_gather(dp_net *d, double bytes, double parts) { return dp_gathers(d, bytes, parts, 1); }

/* The DP group of `size` ranks on route r. */
static dp_net dp_net_of(const plait_cluster *c, const plait_cost_job *j, route r, int size) {
    return (dp_net){.c = c, .r = r, .n = size, .hier = j->hierarchical, .ordered = j->deterministic};
}

/* `times` reductions (reduce-scatters, or all-reduces at twice the times:
 * a reduce-scatter and an all-gather of the same bytes) of `bytes` each:
 * as dp_gathers, flat where they run ordered */
static double dp_sums(dp_net *d, double bytes, double parts, double times) {
    const int hier = d->hier;
    if (d->ordered) d->hier = 0;
    const double t = dp_gathers(d, bytes, parts, times);
    d->hier = hier;
    return t;
}

static double ceil_div(double a, double b) { return b > 0 && a > 0 ? (double)(long long)((a + b - 1) / b) : 1; }

/* The collectives `bytes` of a rank's gradients or weights go in, in
 * buckets of `bucket` bytes: the DP plugin's buckets and ZeRO's units fill
 * up to a bucket from consecutive tensors, but a tensor larger than a
 * bucket is one alone (dp_buckets.c, zero_partition.c), so a rank holding
 * few large tensors (a tp slice of a wide model) starts one collective a
 * tensor, far fewer than bytes / bucket; each pays the ring's latency. */
static double parts_of(const plait_cost_rank *r, double bytes, double bucket) {
    double n = ceil_div(bytes, bucket);
    return r->tensors > 0 && r->tensors < n ? r->tensors : n;
}

/* The DP group's collectives in a step, as plait's optimizers run them:
 * plain DP and ZeRO-1 reduce the accumulated gradients once, in buckets
 * (all-reduce; ZeRO-1 a reduce-scatter and the updated weights' all-gather);
 * ZeRO-2 and 3 reduce-scatter each micro-batch's gradients as its backward
 * makes them (float32, the sum kept in the sharded
 * buffer), ZeRO-2 all-gathers the updated weights once, ZeRO-3 all-gathers
 * each layer's weights before its forward and again before its backward, of
 * every micro-batch. The reduction of every part but the last hides behind
 * the backward pass (ZeRO-2/3: the last micro-batch's last unit is
 * exposed); ZeRO-3's gathers are prefetched except the first
 * layer's, and without prefetch ([optim.zero3] prefetch_layers = 0) each
 * layer's hook waits for its own. Plain DP with [parallel.dp] overlap =
 * false starts its buckets after the backward: nothing hides. */
static void dp_times(const plait_cost_rank *r, const plait_cost_job *j, dp_net *d, double *hidden, double *exposed,
                     double *ahead, double *bytes) {
    plait_cost_bytes b;
    plait_cost_bytes_of(&b);
    int n = d->n; /* dp x cp */
    double m = r->micro_batches > 0 ? r->micro_batches : 1;
    *hidden = *exposed = *ahead = *bytes = 0;
    if (n <= 1) return;
    /* overlap_param_gather: the updated weights' gathers but the first
     * unit's travel beside the next step's forward */
    const int overlap = j->zero >= 1 && j->zero <= 2 && (j->overlap_gather & (1 << j->zero));
    /* compression (grad_wire, param_wire): the gradients' reductions and
     * ZeRO's parameter gathers (the updated weights' of stages 1/2, the
     * layers' of stage 3) move that share of their bytes */
    double g = r->grad_wire > 0 ? r->grad_wire : 1, w = r->param_wire > 0 ? r->param_wire : 1;
    double W = b.weight * r->param_numel, layers = ceil_div(r->param_numel, r->largest_layer_numel);
    /* a distributed optimizer's updated weights read through the bf16
     * copy travel in bf16, whatever param_gather says of the others: W'
     * the gathers' bytes at float32's rate */
    const double Wg = plait_cost_distributed(r, j) && w >= 1 ? W - 2 * r->master_numel : W;
    /* ZeRO's units (plait_cost_zero_unit_bytes), never two layers */
    double unit = j->zero > 0 ? plait_cost_zero_unit_bytes(j->bucket_bytes, j->zero, n) : j->bucket_bytes;
    const int grown = j->zero > 0 && unit > (j->bucket_bytes > 0 ? j->bucket_bytes : PLAIT_COST_ZERO_BUCKET);
    if (j->zero <= 1) {
        double S = b.grad * r->param_numel * g, last = S < unit * g ? S : unit * g;
        double parts = parts_of(r, S - last, unit * g);
        if (j->zero == 1 && grown && parts < layers - 1) parts = layers - 1;
        if (j->zero == 0) {
            *hidden = S > last ? dp_sums(d, S - last, parts, 2) : 0; /* no bucket before the last */
            *exposed = dp_sums(d, last, 1, 2);
            if (j->dp_serial) { /* [parallel.dp] overlap = false: every bucket after the backward */
                *exposed += *hidden;
                *hidden = 0;
            }
            *bytes = 2.0 * (n - 1) / n * S;
        } else {
            *hidden = S > last ? dp_sums(d, S - last, parts, 1) : 0;
            double units = parts_of(r, W, unit);
            if (grown && units < layers) units = layers;
            double ag = dp_gather(d, Wg * w, units), first = overlap ? ag / units : ag;
            *exposed = dp_sums(d, last, 1, 1) + first;
            *ahead = ag - first;
            *bytes = (n - 1.0) / n * (S + Wg * w);
        }
        return;
    }
    /* stages 2 and 3: every micro-batch's gradients */
    double G = W * g, last = G < unit * g ? G : unit * g, units = parts_of(r, W, unit);
    if (grown && units < layers) units = layers;
    double rs = dp_sums(d, G, units, m);
    if (j->zero == 2) {
        double tail = dp_sums(d, last, 1, 1);
        double ag = dp_gather(d, Wg * w, units), first = overlap ? ag / units : ag;
        *hidden = rs - tail;
        *exposed = tail + first;
        *ahead = ag - first;
        *bytes = (n - 1.0) / n * (m * G + Wg * w);
    } else {
        /* on bf16 activations the weights the products read travel in
         * bf16 (master_numel), the others in param_gather's format */
        double U = b.weight * r->largest_layer_numel * w;
        if (plait_cost_zero3_bf16(r, j) && w >= 1) {
            U = b.weight * r->largest_gather_numel;
            W -= 2 * r->master_numel;
        }
        double first = dp_gather(d, U, 1);
        /* a gather a unit (zero_gather.c's start_gather), and units never
         * span two layers */
        if (r->tensors <= 0) units = layers;
        const double gathers = dp_gathers(d, W * w, units > layers ? units : layers, 2 * m);
        /* the last unit's reduce-scatter, after the last backward, as ZeRO-2's */
        const double tail = dp_sums(d, last, 1, 1);
        if (j->zero3_gathered == 1) { /* no prefetch */
            *hidden = rs - tail;
            *exposed = tail + gathers;
        } else {
            *hidden = rs - tail + gathers - first;
            *exposed = tail + first;
        }
        *bytes = (n - 1.0) / n * m * (2 * W * w + G);
    }
}

/* Bytes a rank's optimizer step moves: AdamW over the parameters it owns
 * (all, or its ZeRO shard), then, under bf16 activations, the bf16 copy of
 * its weights made again from them (at each layer's next forward: a pass
 * bound by memory bandwidth like the update; under ZeRO-3 at each forward
 * and backward of each micro-batch, its slice of the weights gathered in
 * bf16 and a tied head's copy; a distributed optimizer rounds its slice
 * and copies the gathered bf16 values into the copy). */
static double optim_bytes(const plait_cost_rank *r, const plait_cost_job *j) {
    plait_cost_bytes b;
    plait_cost_bytes_of(&b);
    int n = (j->dp > 0 ? j->dp : 1) * (j->cp > 1 ? j->cp : 1);
    double copies = j->zero >= 3 ? 2.0 * (r->micro_batches > 0 ? r->micro_batches : 1) : 1;
    /* gathering bf16 (ZeRO-3, a distributed optimizer): each rank rounds
     * its slice of those weights at each gather; the model makes no copy
     * of them (ZeRO-3), or takes the gathered values as they are, 2 bytes
     * read and 2 written (ZeRO-1/2) */
    const int rounds = plait_cost_zero3_bf16(r, j) || plait_cost_distributed(r, j);
    const double made = rounds ? r->weight_copy_numel - r->master_numel + r->master_numel / n : r->weight_copy_numel;
    const double copied = plait_cost_distributed(r, j) ? 4 * r->master_numel : 0;
    return plait_cost_adam_io(j->moments16) * (j->zero > 0 ? plait_cost_zero_shard(r, n) : r->param_numel) +
           b.copy_io * made * copies + copied;
}

/* Ring attention's transfers in a step (cost.h, plait_cost_rank's cp_*)
 * and what of them the attention does not hide. Each pass of the ring
 * posts the next block's transfer, then computes the attention of the
 * block it holds (model/ring_attention.c): a transfer hides behind that
 * block's attention, as Megatron-LM's and TransformerEngine's ring
 * attention overlap them, and what it takes beyond is exposed. The
 * forward's passes move K and V against a block's forward attention; the
 * backward's move K and V and the dK and dV going round (two transfers
 * on the ring at once, sharing the rank's bandwidth) against its backward
 * attention, twice the forward's; each layer's dK and dV coming home at
 * the end overlap nothing. All of it, hidden or not, in *all. */
static double ring_exposed(const plait_cost_rank *r, const route *cpr, double kv_bytes, double dkv_bytes, double alone,
                           double *all) {
    *all = 0;
    if (r->cp_passes <= 0 || r->cp_msg_elems <= 0) return 0;
    /* K and V in kv_bytes an element (bf16 on a bf16 run over the core's
     * point-to-point), their gradients' running sums float32 */
    double t = cpr->link->latency + kv_bytes * r->cp_msg_elems / cpr->bandwidth;
    double d = cpr->link->latency + dkv_bytes * r->cp_msg_elems / cpr->bandwidth, f = r->cp_hide_flops / alone;
    double fwd = t > f ? t - f : 0, bwd = t + d > 2 * f ? t + d - 2 * f : 0;
    *all = r->cp_passes * (2 * t + d) + r->cp_tail_msgs * d;
    return r->cp_passes * (fwd + bwd) + r->cp_tail_msgs * d;
}

/* The DP reduction of a rank with experts at ep > 1: the dense
 * parameters over the dp x cp group `d`, the routed experts' over the edp
 * group `e` (the dp x cp / ep ranks holding the same experts, ep x tp
 * ranks apart), each reduction with its own last bucket exposed. */
static void dp_times_ep(const plait_cost_rank *r, const plait_cost_job *j, dp_net *d, dp_net *e, double *hidden,
                        double *exposed, double *ahead, double *bytes) {
    plait_cost_rank dense = *r, experts = *r;
    dense.param_numel -= r->expert_numel;
    experts.param_numel = r->expert_numel;
    double h, x, a, b;
    dp_times(&dense, j, d, hidden, exposed, ahead, bytes);
    dp_times(&experts, j, e, &h, &x, &a, &b);
    *hidden += h;
    *exposed += x;
    *ahead += a;
    *bytes += b;
    d->intra += e->intra;
    d->inter += e->inter;
}

/* A CPU rank's compute rate at `rows` rows a product: a saturating curve,
 * half the large-batch rate at c->half_rows (the weights' packing and every
 * kernel's fixed cost per call, spread over the micro-batch's rows). */
static double rows_share(const plait_cluster *c, double rows) {
    if (c->gpu || c->half_rows <= 0 || rows <= 0) return 1;
    return rows / (rows + c->half_rows);
}

/* What a CPU rank's micro-batch costs besides its FLOPs: its products
 * stream the rank's weights from memory three times (the forward reads
 * them, the backward's input-gradient product reads them again, the
 * weight-gradient product accumulates into gradients of the same size),
 * once per micro-batch whatever its rows. It is why a rank holding all the
 * weights (dp) loses to one holding a slice (tp) beyond the FLOPs, and why
 * many small micro-batches cost more than few large ones. Counted at the
 * node's memory bandwidth, as FLOPs at the node's rate so that the
 * schedule below spreads it like compute. */
#define WEIGHT_PASSES 3.0

static double weight_stream_flops(const plait_cluster *c, const plait_cost_rank *r, double rate) {
    plait_cost_bytes b;
    plait_cost_bytes_of(&b);
    double bytes = WEIGHT_PASSES * b.weight * r->param_numel * (r->micro_batches > 0 ? r->micro_batches : 1);
    return bytes * rate / c->memory_bandwidth;
}

double plait_cost_width_share(const plait_cluster *c, double w) {
    if (!c->gpu || c->half_width <= 0 || w <= 0) return 1;
    return w / (w + c->half_width);
}

double plait_cost_compute_s(const plait_cluster *c, const plait_cost_time *t, double alone, const plait_cost_rank *r,
                            int recompute) {
    double all = recompute ? r->recompute_flops : r->flops;
    double att = recompute ? r->recompute_attention_flops : r->attention_flops;
    double products = alone * plait_cost_width_share(c, r->width);
    if (t->attention_rate <= 0 || att <= 0) return all / products;
    return (all - att) / products + att / t->attention_rate;
}

/* How much longer than alone a slot of the pipeline takes when `busy`
 * ranks of the node compute in it, each on its `threads` threads, and the
 * node has `units` cores. */
static double crowding(double busy, int threads, int units) {
    double f = busy * threads / units;
    return f > 1 ? f : 1;
}

/* The pace of a CPU node's ranks. A rank computes on its own threads (a
 * rank limited to one thread cannot use a second core), and the node's
 * busy ranks share its cores. A pipeline's schedule is S busy slots per
 * rank, S from its bubble b = (p-1)/(S+p-1), with p-1 slots of filling and
 * p-1 of draining in which only some stages are busy: slot i has
 * k(i) = min(i+1, p, S, S+p-1-i) busy stages and lasts a slot's compute
 * times crowding(k(i) ranks of a stage): the bubble costs only as far as
 * the ranks still busy cannot use the cores the idle ones leave. Ranks are
 * placed tp innermost, then dp, then pp; the first node, where the
 * pipeline fills, is the one followed. No faster than the busiest node's
 * whole work at the node's rate. */
static void cpu_pace(const plait_cost_rank *stages, const plait_cost_job *j, const plait_cluster *c, int per_node,
                     int threads, double comm_max, plait_cost_time *out, double *fwd_bwd, double *opt_max) {
    int dp = j->dp * (j->cp > 1 ? j->cp : 1), tp = j->tp, pp = j->pp, n = dp * tp * pp; /* dp x cp */
    int units = c->units_per_node > 0 ? c->units_per_node : 1;
    double rate = out->rate, alone = rate / units * threads, node_work_max = 0, tau = 0;
    for (int first = 0; first < n; first += per_node) {
        double work = 0, opt_bytes = 0;
        for (int w = first; w < n && w < first + per_node; w++) {
            const plait_cost_rank *r = &stages[w / (tp * dp)];
            work += r->flops / rows_share(c, r->rows) + weight_stream_flops(c, r, rate);
            opt_bytes += optim_bytes(r, j);
        }
        if (work / rate > node_work_max) node_work_max = work / rate;
        if (opt_bytes / c->memory_bandwidth > *opt_max) *opt_max = opt_bytes / c->memory_bandwidth;
    }
    double bubble = 0, mean = 0;
    for (int s = 0; s < pp; s++) {
        double w = weight_stream_flops(c, &stages[s], rate);
        double t = (stages[s].flops / rows_share(c, stages[s].rows) + w) / alone;
        if (t > tau) {
            tau = t;
            out->stream = w / alone;
        }
        mean += t / pp;
        if (stages[s].bubble > bubble) bubble = stages[s].bubble;
    }
    int group = dp * tp < per_node ? dp * tp : per_node;   /* ranks of a stage on the node */
    int on_node = per_node / (dp * tp) > 1 ? per_node / (dp * tp) : 1; /* stages on it */
    double S = pp > 1 && bubble > 0 ? (pp - 1) * (1 - bubble) / bubble : 1, slots = 0;
    if (S < 1) S = 1;
    /* the filling and draining slots, then the full ones */
    int full = pp < S ? pp : (int)S;
    for (int k = 1; k < full; k++) slots += 2 * crowding(group * (k < on_node ? k : on_node), threads, units);
    double steady = S + pp - 1 - 2.0 * (full - 1);
    slots += steady * crowding(group * (full < on_node ? full : on_node), threads, units);
    /* the slots at the stages' mean compute; the busiest stage cannot go
     * faster than alone through its own micro-batches and the filling and
     * draining of one micro-batch through the other stages */
    double paced = mean * slots / S, own = tau + (mean * pp - tau) / S;
    if (own > paced) paced = own;
    out->shared_cores = 1;
    out->compute = node_work_max > tau ? node_work_max : tau;
    if (paced < out->compute) paced = out->compute;
    out->idle = paced - out->compute;
    out->bubble = paced > 0 ? out->idle / paced : 0;
    out->comm = comm_max;
    *fwd_bwd = paced + comm_max;
}

/* [parallel.tp] overlap: the seconds of a stage's tp collectives (`one`
 * an all-reduce's) that travel beside the weight gradients of their
 * products, as far as those last at the products' rate. The caller counts
 * none on a CPU node whose cores the ranks fill: the collectives' sums
 * take the same cores, as for DP below. */
static double tp_behind(const plait_cost_rank *r, const plait_cluster *c, double alone, double one) {
    if (r->tp_hide_msgs <= 0) return 0;
    double behind = r->tp_hide_flops / (alone * plait_cost_width_share(c, r->width));
    return r->tp_hide_msgs * one < behind ? r->tp_hide_msgs * one : behind;
}

/* [model] recompute_offload: each kept boundary copied out after its
 * forward and back before its backward, in the compute stream's order
 * (model/model.c, host_store and host_load): on the critical path. */
static double offload_s(const plait_cluster *c, const plait_cost_rank *r) {
    return r->offload_bytes > 0 && c->host_bandwidth > 0 ? r->offload_bytes / c->host_bandwidth : 0;
}

void plait_cost_step_time(const plait_cost_rank *stages, const plait_cost_job *j, const plait_cluster *c,
                          plait_cost_time *out) {
    memset(out, 0, sizeof *out);
    /* each group on the route [parallel] order gives its members (place) */
    int cp = j->cp > 1 ? j->cp : 1, dp = j->dp * cp, tp = j->tp, pp = j->pp, n = dp * tp * pp;
    int ep = j->ep > 1 && dp % j->ep == 0 ? j->ep : 1; /* the innermost ep ranks of dp x cp */
    if (n < 1) return;
    int per_node = plait_cluster_ranks_per_node(c, n);
    int units = c->units_per_node > 0 ? c->units_per_node : 1;
    double rate = 0;
    (void)plait_cluster_rate(c, j->precision, &rate);
    if (rate <= 0) rate = 1; /* the caller checked it; no division by zero */
    out->rate = rate;
    out->attention_rate = plait_cluster_attention_rate(c, j->precision);
    /* a rank's compute rate when it runs alone on its math threads ([run]
     * threads, or its share of the node's cores), and the node's whole
     * rate, which its busy ranks share */
    int threads = plait_cluster_rank_threads(c, n, j->threads);
    double alone = c->gpu ? rate : rate / units * threads;
    plait_cost_bytes sz;
    plait_cost_bytes_of(&sz);
    placement at;
    place(c, j, n, &at);
    route tpr = at.tp, ppr = at.pp, cpr = at.cp, epr = at.ep;
    out->tp_link = tpr.link->kind, out->pp_link = ppr.link->kind;
    out->cp_link = cp > 1 ? cpr.link->kind : NULL, out->ep_link = ep > 1 ? epr.link->kind : NULL;

    double crit = -1, comm_max = 0, opt_max = 0, dp_total = -1;
    for (int s = 0; s < pp; s++) {
        const plait_cost_rank *r = &stages[s];
        double compute = plait_cost_compute_s(c, out, alone, r, 0);
        /* an all-reduce, or under sequence parallelism an all-gather and a
         * reduce-scatter: 2(n-1) steps of S/n either way */
        double mb = r->msg_bytes > 0 ? r->msg_bytes : sz.message, wire = j->wire_bytes > 0 ? j->wire_bytes : mb;
        const double one = plait_cost_allreduce_bw_s(tpr.link->latency, tpr.bandwidth, tp, wire * r->tp_msg_elems);
        double tp_hidden = j->tp_overlap && (c->gpu || per_node * threads < units) ? tp_behind(r, c, alone, one) : 0;
        double tp_s = r->tp_msgs * one - tp_hidden;
        double pp_s = r->pp_msgs * (ppr.link->latency + wire * r->pp_msg_elems / ppr.bandwidth);
        double kv = j->cp_kv_bytes > 0 ? j->cp_kv_bytes : mb, cp_all;
        double cp_s = ring_exposed(r, &cpr, kv, sz.message, alone, &cp_all);
        /* each all-to-all: ep - 1 sends, their bytes on the ep group's
         * link; on the critical path (the shared experts' forward that
         * model/moe.c runs while the dispatch travels is not counted) */
        double ep_s = ep > 1 ? r->ep_msgs * (ep - 1) * epr.link->latency + r->ep_bytes / epr.bandwidth : 0;
        double off_s = offload_s(c, r);
        double span = (compute + tp_s + pp_s + cp_s + ep_s + off_s) / (1 - r->bubble);
        if (span > crit) {
            crit = span;
            out->busiest = s;
            out->compute = compute;
            out->recompute = plait_cost_compute_s(c, out, alone, r, 1);
            out->tp_s = tp_s;
            out->tp_hidden = tp_hidden;
            out->pp_s = pp_s;
            out->wire_bytes = wire;
            out->cp_s = cp_s;
            out->cp_total = cp_all;
            out->cp_kv_bytes = kv;
            out->ep_s = ep_s;
            out->ep_bytes = ep > 1 ? r->ep_bytes : 0;
            out->offload_s = off_s;
            out->offload_bytes = r->offload_bytes;
            out->bubble = r->bubble;
        }
        if (tp_s + pp_s + cp_s + ep_s > comm_max) comm_max = tp_s + pp_s + cp_s + ep_s;
        dp_net d = dp_net_of(c, j, at.dp, dp), edp = dp_net_of(c, j, at.edp, dp / ep); /* d: dp x cp */
        double h, e, a, b;
        if (ep > 1 && r->expert_numel > 0) dp_times_ep(r, j, &d, &edp, &h, &e, &a, &b);
        else dp_times(r, j, &d, &h, &e, &a, &b);
        if (h + e + a > dp_total) {
            dp_total = h + e + a;
            out->dp_hidden = h;
            out->dp_exposed = e;
            out->dp_ahead = a;
            out->dp_intra = d.intra;
            out->dp_inter = d.inter;
            out->dp_link = d.r.link->kind;
            out->dp_hierarchical = d.hier && d.r.link == &c->inter && d.r.local > 1;
        }
        if (b > out->dp_bytes) out->dp_bytes = b;
        if (r->tp_msgs * r->tp_msg_elems * wire > out->tp_bytes) out->tp_bytes = r->tp_msgs * r->tp_msg_elems * wire;
        if (r->pp_msgs * r->pp_msg_elems * wire > out->pp_bytes) out->pp_bytes = r->pp_msgs * r->pp_msg_elems * wire;
        /* a GPU's memory bandwidth is its own */
        double opt = optim_bytes(r, j) / c->memory_bandwidth;
        if (c->gpu && opt > opt_max) opt_max = opt;
    }
    double fwd_bwd = crit;
    out->comm = out->tp_s + out->pp_s + out->cp_s + out->ep_s + out->offload_s;
    out->idle = crit - out->compute - out->comm;
    if (out->idle < 0) out->idle = 0; /* rounding */
    if (!c->gpu) cpu_pace(stages, j, c, per_node, threads, comm_max, out, &fwd_bwd, &opt_max);
    /* what the DP reduction can hide behind: plain DP and ZeRO-1 start a
     * bucket at the last micro-batch's backward of its layers
     * (dp_grads_ready's and zero_after_backward_grads' `last`), so behind
     * that backward alone (two thirds of a micro-batch's compute), however
     * many micro-batches ran before; ZeRO-2 reduce-scatters each
     * micro-batch's gradients as its backward makes them, and they travel
     * beside every micro-batch after it, the last one's behind its own
     * backward; ZeRO-3's gathers and reduce-scatters behind the backward of
     * the whole step. A pipeline changes none of it: a stage's ZeRO-1
     * starts a unit's reduce-scatter at its layers' last backward too. */
    double m = stages[out->busiest].micro_batches > 1 ? stages[out->busiest].micro_batches : 1;
    double backward = 2.0 / 3.0 * out->compute;
    if (j->zero <= 1) backward /= m;
    else if (j->zero == 2) backward = (m - 1) / m * fwd_bwd + backward / m;
    out->dp_window = backward;
    /* overlap_param_gather's gathers beside the next step's first
     * micro-batch's forward (a third of its compute) */
    out->dp_ahead_window = out->compute / 3.0 / m;
    double exposed = out->dp_exposed + (out->dp_hidden > backward ? out->dp_hidden - backward : 0) +
                     (out->dp_ahead > out->dp_ahead_window ? out->dp_ahead - out->dp_ahead_window : 0);
    /* on a CPU node whose cores the ranks fill, the collectives' copies
     * and sums run on those cores: hiding them behind the backward pass
     * only moves the work, so all of it counts */
    if (!c->gpu && per_node * threads >= units) exposed = out->dp_exposed + out->dp_hidden + out->dp_ahead;
    out->comm += exposed;
    out->optim = opt_max;
    out->step = fwd_bwd + exposed + opt_max;
}
