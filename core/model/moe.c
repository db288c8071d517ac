/*
 * The mixture of experts: a sparse block's MLP half. A router (float32)
 * scores each token's normalised row against every expert, picks its top
 * k, and the token's output is the residual plus the shared experts'
 * output plus its k experts' outputs weighted by their gates. Each expert
 * is the architecture's MLP (the GPT's c_fc, GELU, c_proj with biases;
 * the Llama family's gate, up, SwiGLU, down), its weights one slice of a
 * tensor stacked over the experts.
 *
 *   scores  softmax (Mixtral, Switch) or sigmoid (DeepSeek-V3) of the
 *           router's logits; the choice ranks score + expert_bias (the
 *           bias moves outside the gradient, plait_model_moe_balance), the
 *           gates are the chosen scores, renormalised to sum to 1 when
 *           k > 1; ties go to the lower expert index
 *   routes  in token order, so with a capacity (moe_capacity) the first
 *           tokens win and the rest are dropped (their gate counts, their
 *           output is not added)
 *   rows    permuted by expert (expert 0's tokens in token order, then
 *           expert 1's, ...), so each expert's product is one GEMM over
 *           its rows; un-permuted by summing a token's outputs in the
 *           order of expert index, whatever order they were computed in
 *   losses  Switch/GShard's load-balancing loss as Megatron-Core writes
 *           it, aux·E/(N²k)·Σ_e P_e·c_e (P_e the sum of expert e's scores
 *           over the N tokens, c_e the routes it was given), and the
 *           z-loss z/N·Σ_n lse_n², each entering the gradient only (as
 *           Megatron's MoEAuxLossAutoScaler), weighted by the micro-batch's
 *           share of the global batch's tokens like the LM loss
 *
 * Expert parallelism (ep > 1, the expert tensors split over the ep group
 * by the plan): every rank routes its own tokens as above, then the
 * dispatch sends each local expert's rows to the rank holding it (the
 * per-expert row counts first, one all-to-all, then the rows, point to
 * point, whatever their number; the shared experts' forward runs while
 * they travel), the holder runs each source rank's rows of each of its
 * experts as one GEMM of their own (the very product that rank would run
 * at ep 1) and the combine sends the outputs back into the permuted rows,
 * which are summed into each token as above. The backward trades the
 * rows' gradients the same way; the holder computes each source's weight
 * gradients apart and adds them in the summation tree's
 * order over the sources (coll/sum_tree.c: left-complete, pairwise, the
 * earlier source on the left), the order in which an ordered reduction
 * over the dp x cp group would add them at ep 1. So at one micro-batch a
 * rank, ep 2 and 4 compute the bits of ep 1 (docs/parallelism.md).
 *
 * Tensor parallelism (tp > 1, ep = 1; Megatron-Core's expert tensor
 * parallelism = tp): each expert's width (and the shared experts') is
 * split over the tp group as a dense MLP's, c_fc, gate and up column-,
 * c_proj and down row-parallel, so every tp rank routes all N tokens
 * (the router replicated, reading the norm's rows all-gathered under
 * sequence parallelism) and runs every route through its slice of the
 * width. The combine sums the partial outputs, the row-parallel bias
 * added on the group's first rank only, and one all-reduce (a
 * reduce-scatter under sequence parallelism) completes them before the
 * residual (moe_unpermute into the partial sums over a zeroed residual;
 * the entry has no form without one). The losses and counts the trainer
 * reports are counted on the group's first rank. In the backward a gate's
 * gradient, the dot of the token's output gradient with its route's
 * output, is such a partial sum too: moe_unpermute_backward's N·k dots
 * are summed over the group (in float, through host memory: the tp
 * operators sum floats) before moe_route_backward; the router's input
 * gradient (whole on every rank) joins the input gradient's partial sums
 * on the first rank before their all-reduce.
 *
 * Every step runs through the kernel table's MoE entries (plait/kernels.h,
 * ABI 1.21: the router, the permutation and its inverse, the grouped
 * product over the experts' rows) on the device's memory; the rows each
 * expert was given, the experts' offsets (and, in training, the scores
 * and log-sum-exps the reported losses read) come back to the host once
 * per block and forward, as Megatron-Core's dropless path syncs its
 * counts: the grouped product and the ep trades size themselves by them.
 * The ep trades move the rows from and into the device's memory (the
 * counts, host memory, by the all-to-all), so ep > 1 runs on any device
 * with the MoE entries. The backward runs whole in one call (input and
 * weight gradients).
 *
 * Under recompute = full a slot keeps none of this: every sparse block's
 * forward writes one block's buffers the model shares (m->moe_rc) and frees
 * its held rows, and plait_moe_rerun, called before the block's backward,
 * routes, permutes and runs the experts again (the trades too) without
 * counting the routes twice or running the combine.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "device/device.h"
#include "model/model_internal.h"
#include "runtime/error.h"

/* What a sparse block's forward keeps for its backward (in the slot's
 * moe_mem). N tokens, k routes each, E experts, F an expert's width, SF
 * the shared experts' width. */
typedef struct moe_acts {
    float *logits, *scores; /* [N,E] */
    float *lse;             /* [N] log-sum-exp of the logits (z-loss) */
    float *routed;          /* [E] routes each expert was given, before any drop */
    int32_t *off;           /* [E+1] each expert's first row */
    int32_t *hoff;          /* [E+1] off's host copy (host memory, after the slot's moe_acts) */
    int32_t *idx;           /* [N,k] chosen experts, ascending */
    float *gate;            /* [N,k] */
    int32_t *row;           /* [N,k] each route's permuted row, -1 dropped */
    int32_t *tok;           /* [N·k] the token of a permuted row */
    float *x, *y;           /* [N·k,C] permuted inputs, experts' outputs */
    float *h, *u, *a;       /* [N·k,F]: gpt c_fc's output and GELU's; llama gate's, up's, SwiGLU's */
    float *sh, *su, *sa;    /* [N,SF] the same for the shared experts */
    float *sy;              /* [N,C] the shared experts' output */
} moe_acts;

typedef struct moe_dims {
    int64_t N, C, E, k, F, SF;
    int nt;  /* expert tensors: MOE_GPT_TENSORS or MOE_LLAMA_TENSORS */
    int sel; /* recompute = selective: the activation function's outputs shared (drops_act) */
} moe_dims;

static moe_dims dims_of(const plait_model *m) {
    const moe_desc *md = &m->desc->moe;
    return (moe_dims){.N = m->B * m->T,
                      .C = m->C,
                      .E = md->experts,
                      .k = md->top_k,
                      .F = md->ffn / m->tp, /* this tp rank's slice of each expert's width */
                      .SF = (int64_t)md->shared * md->ffn / m->tp,
                      .nt = m->desc->is_llama ? MOE_LLAMA_TENSORS : MOE_GPT_TENSORS,
                      .sel = m->desc->recompute == PLAIT_RECOMPUTE_SELECTIVE};
}

/* recompute = selective, Megatron-Core's moe_act: the experts' (routed
 * and shared) activation function's outputs, the GELU's (gpt: u, su) or
 * SwiGLU's (llama: a, sa), live in buffers every block shares, and
 * plait_moe_act_rerun rebuilds them from the kept inputs before the
 * block's backward; floats of that buffer (device memory). */
static size_t act_floats(const moe_dims *d) { return ((size_t)(d->N * d->k * d->F + d->N * d->SF) + 63) / 64 * 64; }

/* Floats of one block's moe_acts (ints take a float's room); carved from
 * `base` into *a unless base is NULL. */
static size_t acts_carve(const moe_dims *d, float *base, moe_acts *a) {
    const int64_t N = d->N, Nk = d->N * d->k, E = d->E;
    size_t at = 0;
#define TAKE(ptr, type, n)                                                                                             \
    do {                                                                                                               \
        if (base) (ptr) = (type *)(void *)(base + at);                                                                 \
        at += (size_t)(n);                                                                                             \
    } while (0)
    moe_acts z = {0};
    if (!a) a = &z;
    TAKE(a->logits, float, N *E);
    TAKE(a->scores, float, N *E);
    TAKE(a->lse, float, N);
    TAKE(a->routed, float, E); /* scores .. off: one copy to the host */
    TAKE(a->off, int32_t, E + 1);
    TAKE(a->idx, int32_t, Nk);
    TAKE(a->gate, float, Nk);
    TAKE(a->row, int32_t, Nk);
    TAKE(a->tok, int32_t, Nk);
    TAKE(a->x, float, Nk * d->C);
    TAKE(a->y, float, Nk * d->C);
    const int llama = d->nt == MOE_LLAMA_TENSORS; /* under d->sel the activation's output is shared */
    TAKE(a->h, float, Nk * d->F);
    if (!d->sel || llama) TAKE(a->u, float, Nk * d->F);
    if (!d->sel || !llama) TAKE(a->a, float, Nk * d->F);
    if (d->SF > 0) {
        TAKE(a->sh, float, N * d->SF);
        if (!d->sel || llama) TAKE(a->su, float, N * d->SF);
        if (!d->sel || !llama) TAKE(a->sa, float, N * d->SF);
        TAKE(a->sy, float, N * d->C);
    }
#undef TAKE
    return (at + 63) / 64 * 64; /* each block's part 256-byte aligned */
}

/* recompute = full: a sparse block keeps none of its MLP half's
 * activations; its backward reruns the router, the permutation and the
 * experts (plait_moe_rerun) into one block's buffers all share. */
static int keeps_none(const plait_model *m) { return m->desc->recompute == PLAIT_RECOMPUTE_FULL; }

/* The slot's moe_acts for every sparse block it holds, allocated at its
 * first sparse forward (device memory), with each block's host copy of
 * its offsets in the same host block as the moe_acts array; under
 * keeps_none every block's point at the model's one set (m->moe_rc). */
static plait_status slot_acts(plait_model *m, model_slot *s, int32_t layer, moe_acts **out) {
    const int32_t L = m->desc->n_layer;
    if (!s->moe) {
        const moe_dims d = dims_of(m);
        const size_t per = acts_carve(&d, NULL, NULL);
        size_t n = 0;
        for (int32_t l = 0; l < L; l++) n += desc_block_sparse(m->desc, l) && plait_model_slot_has(m, s, l + 1);
        const size_t E1 = (size_t)d.E + 1;
        const int shared = keeps_none(m);
        const size_t rc = shared ? per : d.sel ? act_floats(&d) : 0;
        if (rc && !m->moe_rc && (m->moe_rc = plait_device_alloc(rc * sizeof(float), "activations")))
            m->act_bytes += m->moe_rc_bytes = rc * sizeof(float);
        s->moe = calloc(1, (size_t)L * (sizeof *s->moe + E1 * sizeof(int32_t)));
        s->moe_bytes = shared ? 0 : n * per * sizeof(float);
        s->moe_mem = s->moe && !shared ? plait_device_alloc(s->moe_bytes, "activations") : NULL;
        if (!s->moe || (rc && !m->moe_rc) || (!shared && !s->moe_mem)) {
            free(s->moe);
            s->moe = NULL;
            s->moe_bytes = 0;
            return plait_set_error(PLAIT_ERR_NO_MEMORY, "model: out of memory for the experts' activations");
        }
        m->act_bytes += s->moe_bytes;
        size_t at = 0;
        for (int32_t l = 0; l < L; l++)
            if (desc_block_sparse(m->desc, l) && plait_model_slot_has(m, s, l + 1)) {
                moe_acts *x = &s->moe[l];
                at += acts_carve(&d, shared ? m->moe_rc : s->moe_mem + at, x);
                x->hoff = (int32_t *)(void *)(s->moe + L) + (size_t)l * E1;
                float *act = d.sel ? m->moe_rc + d.N * d.k * d.F : NULL; /* the routed experts', then the shared */
                if (d.sel && d.nt == MOE_LLAMA_TENSORS) x->a = m->moe_rc, x->sa = d.SF > 0 ? act : NULL;
                else if (d.sel) x->u = m->moe_rc, x->su = d.SF > 0 ? act : NULL;
            }
    }
    *out = &s->moe[layer - 1];
    return PLAIT_OK;
}

/* The backward's scratch, shared by every sparse block and slot. */
typedef struct moe_scratch {
    double *dgate;        /* [N,k] the gates' gradients */
    float *d1, *d2, *d3;  /* [max(N·k, N·S)·F] */
    float *dy, *dx, *dx2; /* [N·k,C] */
    float *dlogits;       /* [N,E] */
    float *grads;         /* at ep > 1: each ep source's gradients of this rank's experts, [ep][ep_grad_floats] */
} moe_scratch;

static int64_t ep_grad_floats(const plait_model *m, const moe_dims *d);

static plait_status scratch_get(plait_model *m, moe_scratch *sc) {
    const moe_dims d = dims_of(m);
    const int64_t wide = d.N * d.k * d.F > d.N * d.SF ? d.N * d.k * d.F : d.N * d.SF;
    const int64_t grads = m->ep > 1 ? m->ep * ep_grad_floats(m, &d) : 0;
    const size_t floats = (size_t)(2 * d.N * d.k + 3 * wide + 3 * d.N * d.k * d.C + d.N * d.E + grads);
    if (!m->moe_scratch) {
        m->moe_scratch = plait_device_alloc(floats * sizeof(float), "activations");
        if (!m->moe_scratch) return plait_wrap_error(PLAIT_ERR_NO_MEMORY, "model: the experts' backward scratch");
        m->moe_scratch_bytes = floats * sizeof(float);
        m->act_bytes += m->moe_scratch_bytes;
    }
    sc->dgate = (double *)(void *)m->moe_scratch; /* first: aligned for doubles */
    float *p = m->moe_scratch + 2 * d.N * d.k;
    sc->d1 = p;
    sc->d2 = p + wide;
    sc->d3 = p + 2 * wide;
    sc->dy = p + 3 * wide;
    sc->dx = sc->dy + d.N * d.k * d.C;
    sc->dx2 = sc->dx + d.N * d.k * d.C;
    sc->dlogits = sc->dx2 + d.N * d.k * d.C;
    sc->grads = m->ep > 1 ? sc->dlogits + d.N * d.E : NULL;
    return PLAIT_OK;
}

/* ---- one MLP (an expert, or the shared experts) -------------------------- */

/* An MLP's weights (or their gradients): gpt w1/b1 = c_fc, w2/b2 = c_proj;
 * llama w1 = gate_proj, w3 = up_proj, w2 = down_proj. */
typedef struct mlp_w {
    float *w1, *b1, *w3, *w2, *b2;
} mlp_w;

/* The MoE tensors of block `layer` (data or gradients) into t[0..n). */
static plait_status moe_tensors(plait_model *m, param_part part, int32_t layer, float **t, int *n) {
    const moe_dims d = dims_of(m);
    *n = MOE_EXPERTS + d.nt * (d.SF > 0 ? 2 : 1);
    return plait_model_tensors(m, part, layer, m->desc->moe_first[layer - 1], *n, t);
}

/* Expert e's slices of the stacked tensors t[MOE_EXPERTS..]; e = -1: the
 * shared experts' tensors after them. */
static mlp_w expert_w(const moe_dims *d, float *const *t, int64_t e) {
    float *const *x = t + MOE_EXPERTS + (e < 0 ? d->nt : 0);
    const int64_t i = e < 0 ? 0 : e, C = d->C, F = d->F;
    if (d->nt == MOE_LLAMA_TENSORS)
        return (mlp_w){.w1 = x[0] + i * F * C, .w3 = x[1] + i * F * C, .w2 = x[2] + i * C * F};
    return (mlp_w){.w1 = x[0] + i * F * C, .b1 = x[1] + i * F, .w2 = x[2] + i * C * F, .b2 = x[3] + i * C};
}

/* The activation function over n floats: gpt u = GELU(h), llama a =
 * SwiGLU(h, u); the one call the forward and plait_moe_act_rerun make. */
static void act_forward(plait_model *m, const moe_dims *d, const float *h, float *u, float *a, int64_t n) {
    if (n == 0) return;
    if (d->nt == MOE_LLAMA_TENSORS) m->k->swiglu_forward(a, h, u, (size_t)n);
    else m->k->gelu_forward(u, h, (size_t)n);
}

/* y [n,C] = the MLP of x [n,C], width F, keeping h, u (and a) [n,F]. */
static void mlp_forward(plait_model *m, const moe_dims *d, const mlp_w *w, const float *x, float *h, float *u, float *a,
                        float *y, int64_t n, int64_t F) {
    const int64_t C = d->C;
    if (n == 0) return;
    m->k->matmul_forward(h, x, w->w1, w->b1, n, C, F);
    if (d->nt == MOE_LLAMA_TENSORS) {
        m->k->matmul_forward(u, x, w->w3, NULL, n, C, F);
        act_forward(m, d, h, u, a, n * F);
        m->k->matmul_forward(y, a, w->w2, NULL, n, F, C);
        return;
    }
    act_forward(m, d, h, u, a, n * F);
    /* c_proj's bias once over the tp group: the partial sums' first rank's */
    m->k->matmul_forward(y, u, w->w2, m->tp_rank == 0 ? w->b2 : NULL, n, F, C);
}

/* dx [n,C] (overwritten) from dy [n,C], the weights' gradients added to
 * g; d1..d3 [n,F] scratch, dx2 [n,C] scratch (llama). */
static void mlp_backward(plait_model *m, const moe_dims *d, const mlp_w *w, const mlp_w *g, const float *x,
                         const float *h, const float *u, const float *a, const float *dy, float *dx, int64_t n,
                         int64_t F, const moe_scratch *sc) {
    const int64_t C = d->C;
    if (n == 0) return;
    if (d->nt == MOE_LLAMA_TENSORS) {
        m->k->matmul_backward(sc->d1, g->w2, NULL, dy, a, w->w2, n, F, C);
        m->k->swiglu_backward(sc->d2, sc->d3, sc->d1, h, u, (size_t)(n * F));
        m->k->matmul_backward(dx, g->w1, NULL, sc->d2, x, w->w1, n, C, F);
        m->k->matmul_backward(sc->dx2, g->w3, NULL, sc->d3, x, w->w3, n, C, F);
        m->k->axpy(dx, sc->dx2, (size_t)(n * C), 1.0f);
        return;
    }
    m->k->matmul_backward(sc->d1, g->w2, g->b2, dy, u, w->w2, n, F, C);
    m->k->gelu_backward(sc->d2, h, sc->d1, (size_t)(n * F));
    m->k->matmul_backward(dx, g->w1, g->b1, sc->d2, x, w->w1, n, C, F);
}

/* ---- the routed experts, grouped ------------------------------------------- */

/* The routed experts' MLPs over their rows x [off[E],C] (off: host
 * memory), each expert's product one of the grouped entry's: the bits of
 * one mlp_forward an expert. */
static void group_forward(plait_model *m, const moe_dims *d, float *const *t, const int32_t *off, const float *x,
                          float *h, float *u, float *a, float *y) {
    float *const *w = t + MOE_EXPERTS;
    const int64_t C = d->C, F = d->F, E = d->E, rows = off[E];
    if (rows == 0) return;
    if (d->nt == MOE_LLAMA_TENSORS) { /* gate, up, down */
        m->k->moe_matmul_forward(h, x, w[0], NULL, off, E, C, F);
        m->k->moe_matmul_forward(u, x, w[1], NULL, off, E, C, F);
        act_forward(m, d, h, u, a, rows * F);
        m->k->moe_matmul_forward(y, a, w[2], NULL, off, E, F, C);
        return;
    }
    m->k->moe_matmul_forward(h, x, w[0], w[1], off, E, C, F); /* c_fc */
    act_forward(m, d, h, u, a, rows * F);
    /* c_proj; its bias once over the tp group: the partial sums' first rank's */
    m->k->moe_matmul_forward(y, u, w[2], m->tp_rank == 0 ? w[3] : NULL, off, E, F, C);
}

/* Their backward: sc->dx [off[E],C] (overwritten) from sc->dy, the
 * weights' gradients added to g's expert slices. */
static void group_backward(plait_model *m, const moe_dims *d, float *const *t, float *const *g, const int32_t *off,
                           const moe_acts *a, const moe_scratch *sc) {
    float *const *w = t + MOE_EXPERTS, *const *gw = g + MOE_EXPERTS;
    const int64_t C = d->C, F = d->F, E = d->E, rows = off[E];
    if (rows == 0) return;
    if (d->nt == MOE_LLAMA_TENSORS) {
        m->k->moe_matmul_backward(sc->d1, gw[2], NULL, sc->dy, a->a, w[2], off, E, F, C);
        m->k->swiglu_backward(sc->d2, sc->d3, sc->d1, a->h, a->u, (size_t)(rows * F));
        m->k->moe_matmul_backward(sc->dx, gw[0], NULL, sc->d2, a->x, w[0], off, E, C, F);
        m->k->moe_matmul_backward(sc->dx2, gw[1], NULL, sc->d3, a->x, w[1], off, E, C, F);
        m->k->axpy(sc->dx, sc->dx2, (size_t)(rows * C), 1.0f);
        return;
    }
    m->k->moe_matmul_backward(sc->d1, gw[2], gw[3], sc->dy, a->u, w[2], off, E, F, C);
    m->k->gelu_backward(sc->d2, a->h, sc->d1, (size_t)(rows * F));
    m->k->moe_matmul_backward(sc->dx, gw[0], gw[1], sc->d2, a->x, w[0], off, E, C, F);
}

/* The load-balancing and z losses of one forward, from host copies of
 * the scores [N,E], log-sum-exps [N] and routes [E]. */
static void losses(const plait_model *m, const moe_dims *d, const float *scores, const float *lse, const float *routed,
                   double *aux, double *z) {
    const int64_t N = d->N, E = d->E;
    double az = 0.0, al = 0.0;
    for (int64_t n = 0; n < N; n++) az += (double)lse[n] * (double)lse[n];
    for (int64_t e = 0; e < E; e++) {
        double p = 0.0;
        for (int64_t n = 0; n < N; n++) p += scores[n * E + e];
        al += p * (double)routed[e];
    }
    *aux = m->desc->moe.aux * (double)E / ((double)N * (double)N * (double)d->k) * al;
    *z = m->desc->moe.z * az / (double)N;
}

/* ---- expert parallelism: the ep group's trades ------------------------------ */

/* The rows this rank's El = E/ep experts computed for its ep group, kept
 * from the forward for the backward (the slot's moe_held: this struct and
 * the counts in host memory, the rows in the device's): from each source
 * rank q, ascending, its rows of local expert 0, then 1, ...
 * (cnt[q·El + le] of them), in the order q permuted them. The device
 * block keeps its size from forward to forward and grows only when a
 * forward holds more rows, so a step does not allocate (and, on a GPU,
 * synchronise) once per block. */
typedef struct moe_held {
    size_t bytes;      /* host and device, counted in the slot's moe_held_bytes */
    int64_t rows, cap; /* rows held now; rows the device block has room for */
    int32_t *cnt;      /* [ep·El] host memory */
    /* in the slot's moe_held_dev block: */
    float *x, *y;     /* [rows,C] inputs, outputs */
    float *h, *u, *a; /* [rows,F] as moe_acts' */
} moe_held;
/* the planner counts a block's head as 72 bytes (cost/activations.c,
 * plait_cost_held_bytes) */
_Static_assert(sizeof(moe_held) == 72, "moe_held is not the 72 bytes plait_cost_held_bytes counts");

/* Row ranges of one trade: this rank's rows for (from) each ep rank. */
typedef struct ep_ranges {
    int64_t send_at[PLAIT_MODEL_MAX_EP], send_n[PLAIT_MODEL_MAX_EP];
    int64_t recv_at[PLAIT_MODEL_MAX_EP], recv_n[PLAIT_MODEL_MAX_EP];
} ep_ranges;

/* The dispatch's ranges: to rank p the permuted rows of its experts; from
 * rank q the rows it counted for this rank's. The combine swaps them. */
static void ep_ranges_of(const plait_model *m, const moe_dims *d, const moe_acts *a, const int32_t *cnt, ep_ranges *r) {
    const int64_t El = d->E / m->ep;
    int64_t at = 0;
    for (int p = 0; p < m->ep; p++) {
        r->send_at[p] = a->hoff[p * El];
        r->send_n[p] = a->hoff[(p + 1) * El] - a->hoff[p * El];
        r->recv_at[p] = at;
        r->recv_n[p] = 0;
        for (int64_t le = 0; le < El; le++) r->recv_n[p] += cnt[p * El + le];
        at += r->recv_n[p];
    }
}

/* Rows of `width` floats between the ep ranks, posted: send_n[p] rows
 * from src + send_at[p] rows to rank p, recv_n[q] rows from rank q into
 * dst + recv_at[q] rows (swap: the combine's direction, recv as send); this
 * rank's own rows copied by the device. ep_wait completes them. src and
 * dst are the device's memory: a transport that moves it (nccl) takes the
 * pointers, one that moves host memory (tcp) has them staged
 * (comm/comm_p2p.c); each request touches its rows only after the kernels
 * queued before its post. Every receive and send of a trade is posted
 * before any wait, so a transport that groups what was posted between two
 * waits (the nccl plugin, plugins/comm/nccl/README.md) runs the trade as
 * one group, each send beside the receive its peer posted with it. */
static plait_status ep_post(plait_model *m, const ep_ranges *r, int swap, const float *src, float *dst, int64_t width,
                            plait_request **req) {
    const int64_t *sat = swap ? r->recv_at : r->send_at, *sn = swap ? r->recv_n : r->send_n;
    const int64_t *rat = swap ? r->send_at : r->recv_at, *rn = swap ? r->send_n : r->recv_n;
    plait_status st = PLAIT_OK;
    const uint32_t tag = 0x4d6f45u; /* "MoE": the only point-to-point on ep_comm */
    const plait_mem_kind kind = plait_device_mem_kind();
    for (int q = 0; q < m->ep && st == PLAIT_OK; q++)
        if (q != m->ep_rank && rn[q] > 0)
            st = plait_comm_p2p_after(m->ep_comm, 0, dst + rat[q] * width, (size_t)(rn[q] * width), PLAIT_F32, q, tag,
                                      kind, NULL, &req[q]);
    for (int p = 0; p < m->ep && st == PLAIT_OK; p++)
        if (p != m->ep_rank && sn[p] > 0)
            st = plait_comm_p2p_after(m->ep_comm, 1, src + sat[p] * width, (size_t)(sn[p] * width), PLAIT_F32, p, tag,
                                      kind, NULL, &req[m->ep + p]);
    if (st == PLAIT_OK && sn[m->ep_rank] > 0)
        m->k->copy(dst + rat[m->ep_rank] * width, src + sat[m->ep_rank] * width, (size_t)(sn[m->ep_rank] * width));
    return st;
}

/* Every request ep_post posted completed (st: the post's status). */
static plait_status ep_wait(plait_model *m, int32_t layer, plait_request **req, plait_status st, const char *what) {
    for (int i = 0; i < 2 * m->ep; i++) {
        plait_status w = req[i] ? plait_request_wait(req[i]) : PLAIT_OK;
        req[i] = NULL;
        if (st == PLAIT_OK) st = w;
    }
    if (st != PLAIT_OK)
        return plait_wrap_error(st, "model: %s of %s's experts (ep rank %d of %d)", what,
                                plait_model_layer_name(m, layer), (int)m->ep_rank, (int)m->ep);
    return PLAIT_OK;
}

static plait_status ep_trade(plait_model *m, int32_t layer, const ep_ranges *r, int swap, const float *src, float *dst,
                             int64_t width, const char *what) {
    plait_request *req[2 * PLAIT_MODEL_MAX_EP] = {0};
    return ep_wait(m, layer, req, ep_post(m, r, swap, src, dst, width, req), what);
}

/* A device buffer every sparse block shares, grown to `need` floats (at
 * least 1) when it holds fewer: what it held is not kept, as no block
 * reads another's contents. Counted in the model's act_bytes. */
static plait_status shared_grow(plait_model *m, float **buf, size_t *floats, size_t need, const char *what) {
    if (need <= *floats && *buf) return PLAIT_OK;
    float *p = plait_device_alloc((need ? need : 1) * sizeof *p, "activations");
    if (!p) return plait_wrap_error(PLAIT_ERR_NO_MEMORY, "model: %s", what);
    plait_device_free(*buf);
    m->act_bytes -= *floats * sizeof *p;
    *buf = p;
    *floats = need ? need : 1;
    m->act_bytes += *floats * sizeof *p;
    return PLAIT_OK;
}

/* recompute = selective (moe_dims.sel): the held rows' activation
 * function outputs (gpt u, llama a) in one device buffer every block
 * shares, grown to the largest block's rows (its contents are rebuilt
 * before each block's backward, so growing need not keep them). */
static plait_status held_act(plait_model *m, const moe_dims *d, moe_held *h) {
    plait_status st = shared_grow(m, &m->moe_held_act, &m->moe_held_act_floats, (size_t)(h->rows * d->F),
                                  "the held experts' activations");
    if (st != PLAIT_OK) return st;
    if (d->nt == MOE_LLAMA_TENSORS) {
        h->a = m->moe_held_act;
        return PLAIT_OK;
    }
    h->a = h->u; /* gpt: the GELU's output shared, where u was the unused a */
    h->u = m->moe_held_act;
    return PLAIT_OK;
}

/* Block `layer`'s held rows freed, host and device (none: nothing to do). */
static void held_drop(plait_model *m, model_slot *s, int32_t layer) {
    moe_held *old = s->moe_held ? s->moe_held[layer - 1] : NULL;
    if (!old) return;
    s->moe_held_bytes -= old->bytes;
    m->act_bytes -= old->bytes;
    free(old);
    s->moe_held[layer - 1] = NULL;
    plait_device_free(s->moe_held_dev[layer - 1]);
    s->moe_held_dev[layer - 1] = NULL;
}

/* The held rows' block for block `layer`, room for `rows` (the last
 * forward's device block kept when it has the room). */
static plait_status held_alloc(plait_model *m, model_slot *s, int32_t layer, const moe_dims *d, int64_t rows,
                               moe_held **out) {
    if (!s->moe_held) {
        s->moe_held = calloc((size_t)m->desc->n_layer, sizeof *s->moe_held);
        s->moe_held_dev = calloc((size_t)m->desc->n_layer, sizeof *s->moe_held_dev);
        if (!s->moe_held || !s->moe_held_dev) {
            free(s->moe_held);
            free(s->moe_held_dev);
            s->moe_held = NULL;
            s->moe_held_dev = NULL;
            return plait_set_error(PLAIT_ERR_NO_MEMORY, "model: out of memory for the held experts' rows");
        }
    }
    moe_held *h = s->moe_held[layer - 1];
    if (!h) {
        const size_t n = (size_t)m->ep * (size_t)(d->E / m->ep);
        if (!(h = calloc(1, sizeof *h + n * sizeof(int32_t))))
            return plait_set_error(PLAIT_ERR_NO_MEMORY, "model: out of memory for the held experts' rows");
        h->cnt = (int32_t *)(void *)(h + 1);
        h->bytes = sizeof *h + n * sizeof(int32_t);
        s->moe_held[layer - 1] = h;
        s->moe_held_bytes += h->bytes;
        m->act_bytes += h->bytes;
    }
    const int64_t width = 2 * d->C + (d->sel ? 2 : 3) * d->F; /* x, y and h, u, a (d->sel: held_act) */
    float **dev = &s->moe_held_dev[layer - 1];
    if (!*dev || h->cap < rows) {
        const size_t bytes = (size_t)((rows > 0 ? rows : 1) * width) * sizeof(float);
        float *grown = plait_device_alloc(bytes, "activations");
        if (!grown)
            return plait_wrap_error(PLAIT_ERR_NO_MEMORY, "model: the rows %s's experts hold for the ep group",
                                    plait_model_layer_name(m, layer));
        const size_t had = *dev ? (size_t)(h->cap * width) * sizeof(float) : 0;
        plait_device_free(*dev);
        *dev = grown;
        h->cap = rows > 0 ? rows : 1;
        h->bytes += bytes - had;
        s->moe_held_bytes += bytes - had;
        m->act_bytes += bytes - had;
    }
    h->rows = rows;
    h->x = *dev;
    h->y = h->x + rows * d->C;
    h->h = h->y + rows * d->C;
    h->u = h->h + rows * d->F;
    h->a = h->u + rows * d->F;
    *out = h;
    return d->sel ? held_act(m, d, h) : PLAIT_OK;
}

/* The forward's experts at ep > 1: dispatch, each (source, local expert)
 * product, combine into a->y; the shared experts' forward of `ln` while
 * the dispatch travels. */
static plait_status ep_forward(plait_model *m, model_slot *s, int32_t layer, const moe_dims *d, moe_acts *a,
                               float *const *t, const float *ln) {
    const int64_t El = d->E / m->ep, C = d->C, F = d->F;
    int32_t sent[4096], got[4096]; /* [model] moe_experts <= 4096 */
    if (!m->ep_comm || m->ep > PLAIT_MODEL_MAX_EP)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "model: %s's experts split %d ways without an ep group",
                               plait_model_layer_name(m, layer), (int)m->ep);
    for (int64_t e = 0; e < d->E; e++) sent[e] = a->hoff[e + 1] - a->hoff[e];
    plait_coll_opts opts = {.struct_size = sizeof opts, .label = "experts' row counts"};
    plait_status st = plait_comm_alltoall(m->ep_comm, sent, got, (size_t)El, PLAIT_I32, &opts, NULL);
    if (st != PLAIT_OK)
        return plait_wrap_error(st, "model: the row counts of %s's experts", plait_model_layer_name(m, layer));
    int64_t rows = 0;
    for (int64_t i = 0; i < m->ep * El; i++) rows += got[i];
    moe_held *h = NULL;
    if ((st = held_alloc(m, s, layer, d, rows, &h)) != PLAIT_OK) return st;
    memcpy(h->cnt, got, (size_t)(m->ep * El) * sizeof *got);
    ep_ranges r;
    ep_ranges_of(m, d, a, h->cnt, &r);
    plait_request *req[2 * PLAIT_MODEL_MAX_EP] = {0};
    st = ep_post(m, &r, 0, a->x, h->x, C, req);
    if (st == PLAIT_OK && d->SF > 0) {
        const mlp_w w = expert_w(d, t, -1);
        mlp_forward(m, d, &w, ln, a->sh, a->su, a->sa, a->sy, d->N, d->SF);
    }
    if ((st = ep_wait(m, layer, req, st, "the dispatch")) != PLAIT_OK) return st;
    int64_t at = 0;
    for (int q = 0; q < m->ep; q++)
        for (int64_t le = 0; le < El; le++) {
            const mlp_w w = expert_w(d, t, le);
            const int64_t n = h->cnt[q * El + le];
            mlp_forward(m, d, &w, h->x + at * C, h->h + at * F, h->u + at * F, h->a + at * F, h->y + at * C, n, F);
            at += n;
        }
    return ep_trade(m, layer, &r, 1, h->y, a->y, C, "the combine");
}

/* Floats of one expert's tensors (the stacked tensors' slices). */
static int64_t expert_floats(const moe_dims *d, int tensor) {
    const int64_t C = d->C, F = d->F;
    if (d->nt == MOE_LLAMA_TENSORS) return F * C;
    static const int wide[MOE_GPT_TENSORS] = {2, 1, 2, 0}; /* c_fc w, c_fc b, c_proj w, c_proj b */
    return wide[tensor] == 2 ? F * C : wide[tensor] == 1 ? F : C;
}

/* Floats of the gradients of one rank's E/ep experts. */
static int64_t ep_grad_floats(const plait_model *m, const moe_dims *d) {
    int64_t G = 0;
    for (int i = 0; i < d->nt; i++) G += d->E / m->ep * expert_floats(d, i);
    return G;
}

/* The backward's experts at ep > 1: the rows' gradients to their holders,
 * each source's weight gradients apart, added over the sources in the
 * summation tree's order into g, the input gradients back into sc->dx. */
static plait_status ep_backward(plait_model *m, model_slot *s, int32_t layer, const moe_dims *d, const moe_acts *a,
                                float *const *t, float *const *g, const moe_scratch *sc) {
    const int64_t El = d->E / m->ep, C = d->C, F = d->F;
    moe_held *h = s->moe_held ? s->moe_held[layer - 1] : NULL;
    if (!h)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "model: backward of %s's experts before their forward",
                               plait_model_layer_name(m, layer));
    /* the held rows' output and input gradients [rows,C] each: live only
     * in this call, so one buffer every block shares */
    plait_status st = shared_grow(m, &m->moe_held_grads, &m->moe_held_grads_floats, (size_t)(2 * h->rows * C),
                                  "the held experts' rows' gradients");
    if (st != PLAIT_OK) return st;
    int64_t G = 0, part[MOE_GPT_TENSORS];
    for (int i = 0; i < d->nt; i++) part[i] = G, G += El * expert_floats(d, i);
    float *dy = m->moe_held_grads, *dx = dy + h->rows * C, *gs = sc->grads;
    m->k->zero(gs, (size_t)(m->ep * G));
    ep_ranges r;
    ep_ranges_of(m, d, a, h->cnt, &r);
    st = ep_trade(m, layer, &r, 0, sc->dy, dy, C, "the output gradients' dispatch");
    int64_t at = 0;
    for (int q = 0; q < m->ep && st == PLAIT_OK; q++) {
        float *gq[MOE_EXPERTS + MOE_GPT_TENSORS];
        for (int i = 0; i < d->nt; i++) gq[MOE_EXPERTS + i] = gs + q * G + part[i];
        for (int64_t le = 0; le < El; le++) {
            const mlp_w w = expert_w(d, t, le), gw = expert_w(d, gq, le);
            const int64_t n = h->cnt[q * El + le];
            mlp_backward(m, d, &w, &gw, h->x + at * C, h->h + at * F, h->u + at * F, h->a + at * F, dy + at * C,
                         dx + at * C, n, F, sc);
            at += n;
        }
    }
    /* the sources' gradients, pairwise with doubling strides: the
     * left-complete tree of coll/sum_tree.c over the ep sources */
    for (int stride = 1; st == PLAIT_OK && stride < m->ep; stride *= 2)
        for (int q = 0; q + stride < m->ep; q += 2 * stride)
            m->k->axpy(gs + q * G, gs + (q + stride) * G, (size_t)G, 1.0f);
    for (int i = 0; st == PLAIT_OK && i < d->nt; i++)
        m->k->axpy(g[MOE_EXPERTS + i], gs + part[i], (size_t)(El * expert_floats(d, i)), 1.0f);
    if (st == PLAIT_OK) st = ep_trade(m, layer, &r, 1, dx, sc->dx, C, "the input gradients' combine");
    return st;
}

/* ---- forward and backward -------------------------------------------------- */

/* The routes' counts and offsets (and in training the scores and
 * log-sum-exps) into host memory: the block's one synchronisation. The
 * reported losses and counts are added to the model's here. Returns the
 * routes dropped. */
static plait_status read_routes(plait_model *m, const moe_dims *d, moe_acts *a, int32_t layer, int64_t *dropped) {
    const int64_t N = d->N, E = d->E, train = !m->forward_only;
    /* scores, lse, routed and off lie in this order (acts_carve) */
    const float *from = train ? a->scores : a->routed;
    const size_t n = (size_t)((train ? N * E + N : 0) + E + E + 1);
    float *h = malloc(n * sizeof *h);
    plait_status st = h ? plait_device_copy(h, from, n * sizeof *h, PLAIT_COPY_TO_HOST)
                        : plait_set_error(PLAIT_ERR_NO_MEMORY, "model: out of memory");
    if (st != PLAIT_OK) {
        free(h);
        return plait_wrap_error(st, "model: the routes of %s's experts", plait_model_layer_name(m, layer));
    }
    const float *routed = h + (train ? N * E + N : 0);
    memcpy(a->hoff, routed + E, (size_t)(E + 1) * sizeof *a->hoff);
    *dropped = N * d->k - a->hoff[E];
    if (train && m->tp_rank == 0 && !m->moe_rerun) { /* what the trainer reports and balances with: its tp
                                                      * group's ranks route the same tokens, counted once */
        double aux, z;
        losses(m, d, h, h + N * E, routed, &aux, &z);
        const double share = (double)N * (double)m->loss_scale;
        m->moe_aux += aux * share;
        m->moe_z += z * share;
        m->moe_dropped += *dropped;
        m->moe_forwards++;
        for (int64_t e = 0; e < E; e++) m->moe_counts[(layer - 1) * E + e] += (int64_t)routed[e];
    }
    free(h);
    return PLAIT_OK;
}

plait_status plait_moe_forward(plait_model *m, model_slot *s, int32_t layer, const float *ln, const float *res,
                               float *out) {
    const moe_dims d = dims_of(m);
    moe_acts *a = NULL;
    float *t[MOE_EXPERTS + 2 * MOE_GPT_TENSORS];
    int nt;
    plait_status st = slot_acts(m, s, layer, &a);
    if (st == PLAIT_OK) st = moe_tensors(m, PARAM_DATA, layer, t, &nt);
    if (st != PLAIT_OK) return st;
    const int64_t N = d.N, C = d.C, k = d.k;
    const double cf = m->desc->moe.capacity;
    const int64_t cap = cf > 0 ? (int64_t)ceil(cf * (double)(N * k) / (double)d.E) : N * k;
    m->k->matmul_forward(a->logits, ln, t[MOE_ROUTER], NULL, N, C, d.E);
    m->k->moe_route(a->scores, a->lse, a->idx, a->gate, a->logits, t[MOE_BIAS], N, d.E, k, m->desc->moe.sigmoid);
    m->k->moe_permute(a->row, a->tok, a->off, a->routed, a->x, a->idx, ln, N, d.E, k, C, cap);
    int64_t dropped = 0;
    if ((st = read_routes(m, &d, a, layer, &dropped)) != PLAIT_OK) return st;
    if (m->ep == 1) group_forward(m, &d, t, a->hoff, a->x, a->h, a->u, a->a, a->y);
    if (m->ep > 1 && (st = ep_forward(m, s, layer, &d, a, t, ln)) != PLAIT_OK) return st;
    if (d.SF > 0 && m->ep == 1) {
        const mlp_w w = expert_w(&d, t, -1);
        mlp_forward(m, &d, &w, ln, a->sh, a->su, a->sa, a->sy, N, d.SF);
    }
    if (m->moe_rerun) return PLAIT_OK;         /* the backward reads the experts' outputs, not the block's */
    if (keeps_none(m)) held_drop(m, s, layer); /* the rerun trades the rows again */
    /* the combine: residual, shared experts, then the k routes by expert
     * index; under tp the partial sums over a zero residual, the residual
     * added after their sum */
    if (!m->tp_ops) {
        m->k->moe_unpermute(out, res, d.SF > 0 ? a->sy : NULL, a->y, a->row, a->gate, N, k, C);
        return PLAIT_OK;
    }
    float *acc = plait_tp_partial(m, out);
    m->k->zero(acc, (size_t)(N * C));
    m->k->moe_unpermute(acc, acc, d.SF > 0 ? a->sy : NULL, a->y, a->row, a->gate, N, k, C);
    if ((st = plait_tp_sum(m, acc, out, "after the experts", layer)) != PLAIT_OK) return st;
    m->k->axpy(out, res, (size_t)(m->R * C), 1.0f);
    return PLAIT_OK;
}

/* Under tp: the gates' partial dots dgate [N,k] (doubles, device memory)
 * summed over the group. The tp operators sum floats in device memory, so
 * the dots go through host memory as floats and back (N·k values, the
 * rounding the dense path's float partial sums have), summed in `tmp`
 * (device memory, N·k floats). */
static plait_status gate_grads_tp(plait_model *m, const moe_dims *d, double *dgate, float *tmp, int32_t layer) {
    const size_t n = (size_t)(d->N * d->k);
    double *hd = malloc(n * (sizeof(double) + sizeof(float)) + 1);
    if (!hd) return plait_set_error(PLAIT_ERR_NO_MEMORY, "model: out of memory for the gates' gradients");
    float *hf = (float *)(void *)(hd + n);
    plait_status st = plait_device_copy(hd, dgate, n * sizeof *hd, PLAIT_COPY_TO_HOST);
    for (size_t i = 0; st == PLAIT_OK && i < n; i++) hf[i] = (float)hd[i];
    if (st == PLAIT_OK) st = plait_device_copy(tmp, hf, n * sizeof *hf, PLAIT_COPY_TO_DEVICE);
    if (st == PLAIT_OK && (st = m->tp_ops->reduce_sum(m->tp_ops->ctx, tmp, n)) != PLAIT_OK)
        st = plait_model_tp_error(m, st, "all-reduce of the gates' gradients", layer);
    else if (st == PLAIT_OK) st = plait_device_copy(hf, tmp, n * sizeof *hf, PLAIT_COPY_TO_HOST);
    for (size_t i = 0; st == PLAIT_OK && i < n; i++) hd[i] = (double)hf[i];
    if (st == PLAIT_OK) st = plait_device_copy(dgate, hd, n * sizeof *hd, PLAIT_COPY_TO_DEVICE);
    free(hd);
    return st;
}

plait_status plait_moe_backward(plait_model *m, model_slot *s, int32_t layer, const float *ln, const float *dy_rows,
                                float *dln) {
    const moe_dims d = dims_of(m);
    const int64_t N = d.N, C = d.C, k = d.k;
    moe_acts *a = s->moe ? &s->moe[layer - 1] : NULL;
    if (!a || !a->logits)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "model: backward of sparse block %s before its forward",
                               plait_model_layer_name(m, layer));
    float *t[MOE_EXPERTS + 2 * MOE_GPT_TENSORS], *g[MOE_EXPERTS + 2 * MOE_GPT_TENSORS];
    int nt;
    moe_scratch sc = {0};
    plait_status st = moe_tensors(m, PARAM_DATA, layer, t, &nt);
    if (st == PLAIT_OK) st = moe_tensors(m, PARAM_GRAD, layer, g, &nt);
    if (st == PLAIT_OK) st = scratch_get(m, &sc);
    const float *dy = dy_rows; /* over every token: gathered under sequence parallelism */
    if (st == PLAIT_OK) st = plait_tp_grad_full(m, dy_rows, &dy, "after the experts", layer);
    if (st != PLAIT_OK) return st;
    /* the shared experts see dy whole; their input gradient starts dln */
    if (d.SF > 0) {
        const mlp_w w = expert_w(&d, t, -1), gw = expert_w(&d, g, -1);
        mlp_backward(m, &d, &w, &gw, ln, a->sh, a->su, a->sa, dy, dln, N, d.SF, &sc);
    } else m->k->zero(dln, (size_t)(N * C));
    /* each route's output gradient (gate × dy) in its row, the gate's
     * (dy · its output), then the router's logits' */
    const moe_desc *md = &m->desc->moe;
    m->k->moe_unpermute_backward(sc.dy, sc.dgate, dy, a->y, a->row, a->gate, N, k, C);
    if (m->tp_ops && (st = gate_grads_tp(m, &d, sc.dgate, sc.dlogits, layer)) != PLAIT_OK) return st;
    m->k->moe_route_backward(sc.dlogits, sc.dgate, a->logits, a->scores, a->lse, a->idx, a->gate, a->routed, N, d.E, k,
                             md->sigmoid, md->aux, md->z, (double)N * (double)m->loss_scale);
    if (m->ep == 1) group_backward(m, &d, t, g, a->hoff, a, &sc);
    if (m->ep > 1 && (st = ep_backward(m, s, layer, &d, a, t, g, &sc)) != PLAIT_OK) return st;
    if (keeps_none(m)) held_drop(m, s, layer);
    /* un-permute: each token's routes added in the order of expert index */
    m->k->moe_permute_backward(dln, sc.dx, a->row, N, k, C);
    /* the router: its weight's gradient and its input's, added last */
    m->k->matmul_backward(sc.dx2, g[MOE_ROUTER], NULL, sc.dlogits, ln, t[MOE_ROUTER], N, C, d.E);
    if (m->tp_rank == 0) m->k->axpy(dln, sc.dx2, (size_t)(N * C), 1.0f);
    return plait_tp_grad_sum(m, dln, "before the router and experts", layer);
}

plait_status plait_moe_act_rerun(plait_model *m, model_slot *s, int32_t layer) {
    const moe_dims d = dims_of(m);
    const moe_acts *a = s->moe ? &s->moe[layer - 1] : NULL;
    moe_held *h = m->ep > 1 && s->moe_held ? s->moe_held[layer - 1] : NULL;
    if (!a || !a->logits || (m->ep > 1 && !h))
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "model: recompute of %s's experts before their forward",
                               plait_model_layer_name(m, layer));
    /* the forward's own calls over the same spans (mlp_forward,
     * group_forward): the same bits */
    act_forward(m, &d, a->sh, a->su, a->sa, d.N * d.SF);
    if (m->ep == 1) {
        act_forward(m, &d, a->h, a->u, a->a, a->hoff[d.E] * d.F);
        return PLAIT_OK;
    }
    /* the shared device buffer another block may have moved */
    h->u = d.nt == MOE_LLAMA_TENSORS ? h->u : h->h + h->rows * d.F; /* held_act's layout, again */
    plait_status st = held_act(m, &d, h);
    const int64_t El = d.E / m->ep, F = d.F;
    int64_t at = 0;
    for (int64_t i = 0; st == PLAIT_OK && i < m->ep * El; i++) {
        act_forward(m, &d, h->h + at * F, h->u + at * F, h->a + at * F, h->cnt[i] * F);
        at += h->cnt[i];
    }
    return st;
}

plait_status plait_moe_rerun(plait_model *m, model_slot *s, int32_t layer, const float *ln) {
    /* the same kernels on the same rows and weights choose the same routes
     * and compute the same bits; at ep > 1 every rank of the group reruns
     * the block at the same point of the same schedule, so the trades pair */
    m->moe_rerun = 1;
    plait_status st = plait_moe_forward(m, s, layer, ln, NULL, NULL);
    m->moe_rerun = 0;
    return st;
}

/* ---- the gpt arch's sparse MLP half ---------------------------------------- */

plait_status plait_moe_gpt_half_forward(plait_model *m, model_slot *s, int32_t layer, const float *r, float *y) {
    block_acts *a = &s->blocks[layer - 1];
    float *p[2];
    plait_status st = plait_model_tensors(m, PARAM_DATA, layer, desc_block_param(m->desc, layer - 1, BP_LN2_W), 2, p);
    if (st != PLAIT_OK) return st;
    m->k->layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, r, p[0], p[1], m->R, m->C);
    const float *ln; /* every row: gathered under sequence parallelism */
    if ((st = plait_tp_norm_full(m, a->ln2, &ln, "before the router", layer)) != PLAIT_OK) return st;
    return plait_moe_forward(m, s, layer, ln, r, y);
}

plait_status plait_moe_gpt_half_backward(plait_model *m, model_slot *s, int32_t layer, const float *r, const float *dy,
                                         float *dr) {
    block_acts *a = &s->blocks[layer - 1];
    float *p[2], *g[2];
    const int32_t first = desc_block_param(m->desc, layer - 1, BP_LN2_W);
    plait_status st = plait_model_tensors(m, PARAM_DATA, layer, first, 2, p);
    if (st == PLAIT_OK) st = plait_model_tensors(m, PARAM_GRAD, layer, first, 2, g);
    const float *ln = a->ln2;
    if (st == PLAIT_OK) st = plait_tp_norm_full(m, a->ln2, &ln, "before the router's weight gradient", layer);
    if (st == PLAIT_OK) st = plait_moe_backward(m, s, layer, ln, dy, m->s_dln);
    if (st != PLAIT_OK) return st;
    m->k->copy(dr, dy, (size_t)(m->R * m->C));
    norm_grads ng = plait_tp_norm_grads(m, g[0], g[1]);
    m->k->layernorm_backward(dr, ng.w, ng.b, m->s_dln, r, p[0], a->ln2_mean, a->ln2_rstd, m->R, m->C);
    return plait_tp_norm_grads_sum(m, &ng, layer);
}
