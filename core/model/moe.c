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
 * Expert parallelism (ep > 1): moe_ep.c trades the rows of each
 * expert with the ep rank holding it; moe_experts.c runs the products.
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
 * weight gradients), or in two halves (zero-bubble schedules):
 * the input half runs the same calls without the weight gradients and
 * keeps in the slot the output gradient at each product (the block's
 * output's, the router's logits', each permuted row's at both expert
 * products, the shared experts'; bf16 where the experts run bf16, as
 * their products read them), from which the weight half runs the
 * products' weight halves: one pass's bits. At ep > 1 the rows' output
 * gradients are kept where their weight halves run, on the expert's
 * holder, beside the rows it holds for its sources (moe_ep.c); the
 * weight half trades nothing.
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
#include "model/model_bodies.h"
#include "model/moe_internal.h"
#include "runtime/error.h"

/* recompute = selective, Megatron-Core's moe_act: the experts' (routed
 * and shared) activation function's outputs, the GELU's (gpt: u, su) or
 * SwiGLU's (llama: a, sa), live in buffers every block shares, and
 * plait_moe_act_rerun rebuilds them from the kept inputs before the
 * block's backward; floats of that buffer (device memory). */
static size_t act_floats(const moe_dims *d, int ep) {
    /* at ep > 1 the routed experts' are the holders' (moe_ep.c's) */
    const size_t n = (size_t)((ep > 1 ? 0 : d->N * d->k * d->F) + d->N * d->SF);
    return ((d->bf ? n / 2 : n) + 63) / 64 * 64; /* bf16 where d->bf (F a multiple of 8) */
}

/* Floats of one block's moe_acts (ints take a float's room); carved from
 * `base` into *a unless base is NULL. At ep > 1 the routed experts'
 * hidden tensors (h, u, a) stay NULL: the ranks holding the experts keep
 * those of the rows they ran (moe_ep.c); of this rank's rows the block
 * keeps y, what the combine brings back (the gates' gradients read it),
 * and x, what the dispatch sends, is a buffer every block shares. */
static size_t acts_carve(const moe_dims *d, int ep, float *base, moe_acts *a) {
    const int64_t N = d->N, Nk = d->N * d->k, E = d->E;
    size_t at = 0;
#define TAKE(ptr, type, n)                                                                                             \
    do {                                                                                                               \
        if (base) (ptr) = (type *)(void *)(base + at);                                                                 \
        at += (size_t)(n);                                                                                             \
    } while (0)
    /* the experts' rows and hidden tensors: bf16 where d->bf (C and F
     * multiples of 8, so each stays 16-byte aligned) */
#define TAKE_ROWS(ptr, n) TAKE(ptr, float, d->bf ? (n) / 2 : (n))
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
    if (ep == 1) TAKE_ROWS(a->x, Nk * d->C); /* at ep > 1 the dispatch's buffer (moe_ep.c) */
    TAKE_ROWS(a->y, Nk * d->C);
    const int llama = d->nt == MOE_LLAMA_TENSORS; /* under d->sel the activation's output is shared */
    const int gu = llama && d->bf;                /* gate|up side by side in h, no u */
    if (ep == 1) { /* at ep > 1 the experts' hidden tensors are their holders' (moe_ep.c's held rows) */
        TAKE_ROWS(a->h, (gu ? 2 : 1) * Nk * d->F);
        if ((!d->sel || llama) && !gu) TAKE_ROWS(a->u, Nk * d->F);
        if (!d->sel || !llama) TAKE_ROWS(a->a, Nk * d->F);
    }
    if (d->SF > 0) {
        TAKE_ROWS(a->sh, (gu ? 2 : 1) * N * d->SF);
        if ((!d->sel || llama) && !gu) TAKE_ROWS(a->su, N * d->SF);
        if (!d->sel || !llama) TAKE_ROWS(a->sa, N * d->SF);
        TAKE_ROWS(a->sy, N * d->C);
        if (d->bf) TAKE_ROWS(a->sx, N * d->C);
    }
#undef TAKE_ROWS
#undef TAKE
    return (at + 63) / 64 * 64; /* each block's part 256-byte aligned */
}

/* Floats of one block's kept output gradients (moe_acts' k* fields, a
 * split backward's), carved from `base` into *a unless base is NULL. A
 * slot holds them whatever [model] recompute drops: the products they
 * feed run after later blocks' input halves, which overwrite the shared
 * scratch. Where the experts run bf16 the rows' and the shared experts'
 * are the bf16 gradients their products read (the first product's one
 * tensor: gpt c_fc's through the GELU, llama gate|up side by side), half
 * the bytes; the block's output gradient stays float32, the shared
 * experts' bf16 copy of it rounded again in the weight half (one to_bf16,
 * the same bits) rather than kept beside it. */
static size_t kept_carve(const moe_dims *d, int ep, float *base, moe_acts *a) {
    const int64_t N = d->N, Nk = d->N * d->k;
    const int llama = d->nt == MOE_LLAMA_TENSORS;
    size_t at = 0;
#define TAKE(ptr, n)                                                                                                   \
    do {                                                                                                               \
        if (base) (ptr) = base + at;                                                                                   \
        at += ((size_t)(n) + 63) / 64 * 64;                                                                            \
    } while (0)
    moe_acts z = {0};
    if (!a) a = &z;
    const int two = llama && !d->bf; /* float32 llama: gate's and up's apart */
    TAKE(a->kdy, N * d->C);
    TAKE(a->kdlogits, N * d->E);
    if (ep == 1) { /* at ep > 1 the holders keep the rows' (moe_ep.c) */
        TAKE(a->krdy, d->bf ? Nk * d->C / 2 : Nk * d->C);
        TAKE(a->krd2, d->bf ? plait_moe_bf16_first_floats(d, Nk, d->F) : Nk * d->F);
        if (two) TAKE(a->krd3, Nk * d->F);
    }
    if (d->SF > 0) TAKE(a->ksd2, d->bf ? plait_moe_bf16_first_floats(d, N, d->SF) : N * d->SF);
    if (d->SF > 0 && two) TAKE(a->ksd3, N * d->SF);
#undef TAKE
    return at;
}

/* recompute = full: a sparse block keeps none of its MLP half's
 * activations; its backward reruns the router, the permutation and the
 * experts (plait_moe_rerun) into one block's buffers all share. */
static int keeps_none(const plait_model *m) { return m->desc->recompute == PLAIT_RECOMPUTE_FULL; }

/* The slot's sparse blocks' moe_acts carved from its moe_mem (or, under
 * keeps_none, m->moe_rc), for the layers of its range. */
static void slot_acts_carve(plait_model *m, model_slot *s, const moe_dims *dp, size_t per, size_t kept, size_t n) {
    const moe_dims d = *dp;
    const int32_t L = m->desc->n_layer;
    const size_t E1 = (size_t)d.E + 1;
    const int shared = keeps_none(m);
    size_t at = 0, kat = shared ? 0 : n * per;
    for (int32_t l = 0; l < L; l++)
        if (desc_block_sparse(m->desc, l) && plait_model_slot_has(m, s, l + 1)) {
            moe_acts *x = &s->moe[l];
            at += acts_carve(&d, m->ep, shared ? m->moe_rc : s->moe_mem + at, x);
            if (kept) kat += kept_carve(&d, m->ep, s->moe_mem + kat, x);
            x->hoff = (int32_t *)(void *)(s->moe + L) + (size_t)l * E1;
            /* the routed experts' (at ep 1), then the shared */
            float *routed = d.sel && m->ep == 1 ? m->moe_rc : NULL;
            float *act = d.sel && m->moe_rc ? plait_moe_at(&d, m->moe_rc, routed ? d.N * d.k * d.F : 0) : NULL;
            if (d.sel && d.nt == MOE_LLAMA_TENSORS) x->a = routed, x->sa = d.SF > 0 ? act : NULL;
            else if (d.sel) x->u = routed, x->su = d.SF > 0 ? act : NULL;
        }
    s->moe_first = s->first;
}

/* A slot moved to another range of alike layers (model_slots.c): its
 * sparse blocks' parts carved afresh in the same memory, and the held
 * rows' blocks (moe_ep.c) handed from each layer of the old range to the
 * one in its place in the new, so that their memory is reused. */
static void slot_acts_moved(plait_model *m, model_slot *s, const moe_dims *d, size_t per, size_t kept, size_t n) {
    const int32_t L = m->desc->n_layer, shift = s->first - s->moe_first;
    if (s->moe_held && shift != 0) {
        void **held = calloc((size_t)L, sizeof *held);
        float **dev = calloc((size_t)L, sizeof *dev);
        if (held && dev) {
            for (int32_t l = 0; l < L; l++)
                if (s->moe_held[l] && l + shift >= 0 && l + shift < L) {
                    held[l + shift] = s->moe_held[l], dev[l + shift] = s->moe_held_dev[l];
                    s->moe_held[l] = NULL, s->moe_held_dev[l] = NULL;
                }
            for (int32_t l = 0; l < L; l++) /* any left outside the new range: freed */
                if (s->moe_held[l]) plait_moe_held_drop(m, s, l + 1);
            memcpy(s->moe_held, held, (size_t)L * sizeof *held);
            memcpy(s->moe_held_dev, dev, (size_t)L * sizeof *dev);
        } else { /* no room to hand them on: freed, allocated again by the forward */
            for (int32_t l = 0; l < L; l++) plait_moe_held_drop(m, s, l + 1);
        }
        free(held);
        free(dev);
    }
    memset(s->moe, 0, (size_t)L * sizeof *s->moe);
    slot_acts_carve(m, s, d, per, kept, n);
}

/* The slot's moe_acts for every sparse block it holds, allocated at its
 * first sparse forward (device memory), with each block's host copy of
 * its offsets in the same host block as the moe_acts array; under
 * keeps_none every block's point at the model's one set (m->moe_rc). */
static plait_status slot_acts(plait_model *m, model_slot *s, int32_t layer, moe_acts **out) {
    const int32_t L = m->desc->n_layer;
    const moe_dims d = plait_moe_dims(m);
    const size_t per = acts_carve(&d, m->ep, NULL, NULL), kept = d.split ? kept_carve(&d, m->ep, NULL, NULL) : 0;
    size_t n = 0;
    for (int32_t l = 0; l < L; l++) n += desc_block_sparse(m->desc, l) && plait_model_slot_has(m, s, l + 1);
    if (s->moe && s->moe_first != s->first) slot_acts_moved(m, s, &d, per, kept, n);
    if (!s->moe) {
        const size_t E1 = (size_t)d.E + 1;
        const int shared = keeps_none(m);
        const size_t rc = shared ? per : d.sel ? act_floats(&d, m->ep) : 0;
        if (rc && !m->moe_rc && (m->moe_rc = plait_device_alloc(rc * sizeof(float), "activations")))
            m->act_bytes += m->moe_rc_bytes = rc * sizeof(float);
        s->moe = calloc(1, (size_t)L * (sizeof *s->moe + E1 * sizeof(int32_t)));
        /* this slot's blocks' activations (unless shared), then their kept gradients */
        s->moe_bytes = ((shared ? 0 : n * per) + n * kept) * sizeof(float);
        s->moe_mem = s->moe && s->moe_bytes ? plait_device_alloc(s->moe_bytes, "activations") : NULL;
        if (!s->moe || (rc && !m->moe_rc) || (s->moe_bytes && !s->moe_mem)) {
            free(s->moe);
            s->moe = NULL;
            s->moe_bytes = 0;
            return plait_set_error(PLAIT_ERR_NO_MEMORY, "model: out of memory for the experts' activations");
        }
        m->act_bytes += s->moe_bytes;
        slot_acts_carve(m, s, &d, per, kept, n);
    }
    *out = &s->moe[layer - 1];
    return PLAIT_OK;
}

static plait_status scratch_get(plait_model *m, moe_scratch *sc) {
    const moe_dims d = plait_moe_dims(m);
    const int64_t wide = d.N * d.k * d.F > d.N * d.SF ? d.N * d.k * d.F : d.N * d.SF;
    const int64_t grads = m->ep > 1 ? m->ep * plait_moe_ep_grad_floats(m, &d) : 0;
    const int64_t gu_dx = d.bf && d.nt == MOE_LLAMA_TENSORS ? d.N * d.k * d.C : 0;
    const size_t floats = (size_t)(2 * d.N * d.k + 3 * wide + 3 * d.N * d.k * d.C + d.N * d.E + grads + gu_dx);
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
    sc->gu_dx = gu_dx ? sc->dlogits + d.N * d.E + grads : NULL;
    sc->dyb = MOE_BF(sc->dy); /* where d.bf: dy's room holds both */
    sc->dxb = sc->dyb + d.N * d.k * d.C;
    return PLAIT_OK;
}

/* The MoE tensors of block `layer` (data or gradients) into t[0..n). */
static plait_status moe_tensors(plait_model *m, param_part part, int32_t layer, float **t, int *n) {
    const moe_dims d = plait_moe_dims(m);
    *n = MOE_EXPERTS + d.nt * (d.SF > 0 ? 2 : 1);
    return plait_model_tensors(m, part, layer, m->desc->moe_first[layer - 1], *n, t);
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
        const double share = (double)N * (double)m->token_scale;
        m->moe_aux += aux * share;
        m->moe_z += z * share;
        m->moe_dropped += *dropped;
        m->moe_forwards++;
        for (int64_t e = 0; e < E; e++) m->moe_counts[(layer - 1) * E + e] += (int64_t)routed[e];
    }
    free(h);
    return PLAIT_OK;
}

/* out = res + the shared experts' output + each token's routes by
 * expert index (the experts' rows bf16 where d->bf, the sum float32). */
static void combine(plait_model *m, const moe_dims *d, const moe_acts *a, float *out, const float *res) {
    const float *sy = d->SF > 0 ? a->sy : NULL;
    if (d->bf) m->k->moe_unpermute_bf16(out, res, MOE_BF(sy), MOE_BF(a->y), a->row, a->gate, d->N, d->k, d->C);
    else m->k->moe_unpermute(out, res, sy, a->y, a->row, a->gate, d->N, d->k, d->C);
}

plait_status plait_moe_forward(plait_model *m, model_slot *s, int32_t layer, const float *ln, const float *res,
                               float *out) {
    const moe_dims d = plait_moe_dims(m);
    moe_acts *a = NULL;
    float *t[MOE_EXPERTS + 2 * MOE_GPT_TENSORS];
    int nt;
    plait_status st = slot_acts(m, s, layer, &a);
    if (st == PLAIT_OK) st = moe_tensors(m, PARAM_DATA, layer, t, &nt);
    if (st != PLAIT_OK) return st;
    const int64_t N = d.N, C = d.C, k = d.k;
    const double cf = m->desc->moe.capacity;
    const int64_t cap = cf > 0 ? (int64_t)ceil(cf * (double)(N * k) / (double)d.E) : N * k;
    if (m->ep > 1 && (st = plait_moe_ep_send_rows(m, &d, a)) != PLAIT_OK) return st;
    m->k->matmul_forward(a->logits, ln, t[MOE_ROUTER], NULL, N, C, d.E);
    m->k->moe_route(a->scores, a->lse, a->idx, a->gate, a->logits, t[MOE_BIAS], N, d.E, k, m->desc->moe.sigmoid);
    if (d.bf) m->k->moe_permute_bf16(a->row, a->tok, a->off, a->routed, MOE_BF(a->x), a->idx, ln, N, d.E, k, C, cap);
    else m->k->moe_permute(a->row, a->tok, a->off, a->routed, a->x, a->idx, ln, N, d.E, k, C, cap);
    int64_t dropped = 0;
    if ((st = read_routes(m, &d, a, layer, &dropped)) != PLAIT_OK) return st;
    if (m->ep == 1 && d.bf) {
        const mlp_wbf w = plait_moe_bf16_w(m, &d, layer, 0);
        plait_moe_bf16_group_forward(m, &d, &w, a->hoff, d.E, d.F, a->x, a->h, a->u, a->a, a->y);
    } else if (m->ep == 1) {
        plait_moe_group_forward(m, &d, t, a->hoff, a->x, a->h, a->u, a->a, a->y);
    }
    if (m->ep > 1 && (st = plait_moe_ep_forward(m, s, layer, &d, a, t, ln)) != PLAIT_OK) return st;
    if (d.SF > 0 && m->ep == 1) plait_moe_shared_forward(m, &d, layer, t, a, ln);
    if (m->moe_rerun) return PLAIT_OK;         /* the backward reads the experts' outputs, not the block's */
    if (keeps_none(m)) plait_moe_held_drop(m, s, layer); /* the rerun trades the rows again */
    /* the combine: residual, shared experts, then the k routes by expert
     * index; under tp the partial sums over a zero residual, the residual
     * added after their sum */
    if (!m->tp_ops) {
        combine(m, &d, a, out, res);
        return PLAIT_OK;
    }
    float *acc = plait_tp_partial(m, out);
    m->k->zero(acc, (size_t)(N * C));
    combine(m, &d, a, acc, acc);
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

/* The weight half of a split backward: the block's MoE gradients from the
 * output gradients its input half kept (a->k*) and the forward's kept
 * inputs, by plait_moe_backward's own products without their input
 * gradients, so the two halves add one pass's bits. Reads no parameter. */
static plait_status moe_weight(plait_model *m, model_slot *s, const moe_acts *a, int32_t layer, const float *ln) {
    const moe_dims d = plait_moe_dims(m);
    float *g[MOE_EXPERTS + 2 * MOE_GPT_TENSORS];
    int nt;
    moe_scratch sc = {0};
    plait_status st = moe_tensors(m, PARAM_GRAD, layer, g, &nt);
    /* the sources' gradients apart (ep > 1); the bf16 copy of kdy (d.bf) */
    if (st == PLAIT_OK && (m->ep > 1 || d.bf)) st = scratch_get(m, &sc);
    if (st != PLAIT_OK) return st;
    if (d.SF > 0 && d.bf) { /* shared_backward's rounding of dy, again */
        const mlp_w gw = plait_moe_expert_w(&d, g, -1);
        const int32_t off[2] = {0, (int32_t)d.N};
        m->k->to_bf16(sc.dyb, a->kdy, (size_t)(d.N * d.C));
        plait_moe_bf16_group_weight(m, &d, &gw, off, 1, d.SF, a->sx, a->su, a->sa, sc.dyb, MOE_BF(a->ksd2));
    } else if (d.SF > 0) {
        const mlp_w gw = plait_moe_expert_w(&d, g, -1);
        plait_moe_mlp_weight(m, &d, &gw, ln, a->su, a->sa, a->kdy, a->ksd2, a->ksd3, d.N, d.SF);
    }
    if (m->ep == 1 && d.bf) {
        const mlp_w gw = plait_moe_expert_w(&d, g, 0);
        plait_moe_bf16_group_weight(m, &d, &gw, a->hoff, d.E, d.F, a->x, a->u, a->a, MOE_BF(a->krdy), MOE_BF(a->krd2));
    } else if (m->ep == 1) {
        plait_moe_group_weight(m, &d, g, a->hoff, a);
    }
    if (m->ep > 1 && (st = plait_moe_ep_backward(m, s, layer, &d, a, NULL, g, &sc, BWD_WEIGHT)) != PLAIT_OK) return st;
    if (keeps_none(m)) plait_moe_held_drop(m, s, layer); /* kept through the input half for this one */
    m->k->matmul_backward(NULL, g[MOE_ROUTER], NULL, a->kdlogits, ln, NULL, d.N, d.C, d.E);
    return PLAIT_OK;
}

/* The shared experts' backward from dy [N,C] (float32), their input
 * gradient into dln (overwritten), their weights' gradients added to gw
 * (NULL pointers: none, a split backward's input half, which keeps the
 * first product's output gradient in a->ksd2 and ksd3): in bf16 where
 * d->bf, from dy rounded into sc->dyb, the input gradient widened from
 * sc->dxb (free until the routes' gradients fill them). */
static void shared_backward(plait_model *m, const moe_dims *d, int32_t layer, float *const *t, const mlp_w *gw,
                            const moe_acts *a, const float *ln, const float *dy, float *dln, const moe_scratch *sc,
                            int keep) {
    const int64_t N = d->N, SF = d->SF;
    if (!d->bf) {
        const mlp_w w = plait_moe_expert_w(d, t, -1);
        plait_moe_mlp_backward(m, d, &w, gw, ln, a->sh, a->su, a->sa, dy, dln, N, SF, sc);
        if (keep) m->k->copy(a->ksd2, sc->d2, (size_t)(N * SF));
        if (keep && a->ksd3) m->k->copy(a->ksd3, sc->d3, (size_t)(N * SF));
        return;
    }
    const int32_t off[2] = {0, (int32_t)N};
    const mlp_wbf w = plait_moe_bf16_w(m, d, layer, -1);
    m->k->to_bf16(sc->dyb, dy, (size_t)(N * d->C));
    plait_moe_bf16_group_backward(m, d, &w, gw, off, 1, SF, a->sx, a->sh, a->su, a->sa, sc->dyb, sc->dxb, sc);
    if (keep) m->k->copy(a->ksd2, plait_moe_bf16_first_grad(d, sc), (size_t)plait_moe_bf16_first_floats(d, N, SF));
    m->k->from_bf16(dln, sc->dxb, (size_t)(N * d->C));
}

plait_status plait_moe_backward(plait_model *m, model_slot *s, int32_t layer, const float *ln, const float *dy_rows,
                                float *dln, bwd_part part) {
    const moe_dims d = plait_moe_dims(m);
    const int64_t N = d.N, C = d.C, k = d.k;
    moe_acts *a = s->moe ? &s->moe[layer - 1] : NULL;
    if (!a || !a->logits)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "model: backward of sparse block %s before its forward",
                               plait_model_layer_name(m, layer));
    if (part != BWD_ALL && !a->kdy)
        return plait_set_error(PLAIT_ERR_INVALID_ARG,
                               "model: sparse block %s's backward in two halves needs a model laid out for it",
                               plait_model_layer_name(m, layer));
    if (part == BWD_WEIGHT) return moe_weight(m, s, a, layer, ln);
    /* one pass: every product's input and weight gradients in one call;
     * the input half: the input gradients, with the output gradients the
     * weight half reads kept in the slot (g stays NULL: no gradient is
     * touched before the weight half's hooks) */
    const int one = part == BWD_ALL;
    float *t[MOE_EXPERTS + 2 * MOE_GPT_TENSORS], *g[MOE_EXPERTS + 2 * MOE_GPT_TENSORS] = {0};
    int nt;
    moe_scratch sc = {0};
    plait_status st = moe_tensors(m, PARAM_DATA, layer, t, &nt);
    if (st == PLAIT_OK && one) st = moe_tensors(m, PARAM_GRAD, layer, g, &nt);
    if (st == PLAIT_OK) st = scratch_get(m, &sc);
    const float *dy = dy_rows; /* over every token: gathered under sequence parallelism */
    if (st == PLAIT_OK) st = plait_tp_grad_full(m, dy_rows, &dy, "after the experts", layer);
    if (st != PLAIT_OK) return st;
    if (!one) m->k->copy(a->kdy, dy, (size_t)(N * C));
    /* the shared experts see dy whole; their input gradient starts dln */
    if (d.SF > 0) {
        const mlp_w gw = one ? plait_moe_expert_w(&d, g, -1) : (mlp_w){0};
        shared_backward(m, &d, layer, t, &gw, a, ln, dy, dln, &sc, !one);
    } else {
        m->k->zero(dln, (size_t)(N * C));
    }
    /* each route's output gradient (gate × dy) in its row, the gate's
     * (dy · its output), then the router's logits' */
    const moe_desc *md = &m->desc->moe;
    if (d.bf) m->k->moe_unpermute_backward_bf16(sc.dyb, sc.dgate, dy, MOE_BF(a->y), a->row, a->gate, N, k, C);
    else m->k->moe_unpermute_backward(sc.dy, sc.dgate, dy, a->y, a->row, a->gate, N, k, C);
    if (m->tp_ops && (st = gate_grads_tp(m, &d, sc.dgate, sc.dlogits, layer)) != PLAIT_OK) return st;
    m->k->moe_route_backward(sc.dlogits, sc.dgate, a->logits, a->scores, a->lse, a->idx, a->gate, a->routed, N, d.E, k,
                             md->sigmoid, md->aux, md->z, (double)N * (double)m->token_scale);
    if (!one) m->k->copy(a->kdlogits, sc.dlogits, (size_t)(N * d.E));
    if (m->ep == 1 && d.bf) {
        const mlp_wbf w = plait_moe_bf16_w(m, &d, layer, 0);
        const mlp_w gw = one ? plait_moe_expert_w(&d, g, 0) : (mlp_w){0};
        plait_moe_bf16_group_backward(m, &d, &w, &gw, a->hoff, d.E, d.F, a->x, a->h, a->u, a->a, sc.dyb, sc.dxb, &sc);
    } else if (m->ep == 1) {
        plait_moe_group_backward(m, &d, t, g, a->hoff, a, &sc);
    }
    if (!one && m->ep == 1) { /* the rows' output gradients at each product (at ep > 1 their holder's) */
        const int64_t rows = a->hoff[d.E];
        if (d.bf) { /* bf16: C and F multiples of 8 */
            m->k->copy(a->krdy, (const float *)(const void *)sc.dyb, (size_t)(rows * C / 2));
            m->k->copy(a->krd2, plait_moe_bf16_first_grad(&d, &sc), (size_t)plait_moe_bf16_first_floats(&d, rows, d.F));
        } else {
            m->k->copy(a->krdy, sc.dy, (size_t)(rows * C));
            m->k->copy(a->krd2, sc.d2, (size_t)(rows * d.F));
            if (a->krd3) m->k->copy(a->krd3, sc.d3, (size_t)(rows * d.F));
        }
    }
    if (m->ep > 1 && (st = plait_moe_ep_backward(m, s, layer, &d, a, t, g, &sc, part)) != PLAIT_OK) return st;
    if (keeps_none(m) && one) plait_moe_held_drop(m, s, layer); /* split: the weight half drops them */
    /* un-permute: each token's routes added in the order of expert index */
    if (d.bf) m->k->moe_permute_backward_bf16(dln, sc.dxb, a->row, N, k, C);
    else m->k->moe_permute_backward(dln, sc.dx, a->row, N, k, C);
    /* the router: its input's gradient (and in one pass its weight's), added last */
    m->k->matmul_backward(sc.dx2, g[MOE_ROUTER], NULL, sc.dlogits, ln, t[MOE_ROUTER], N, C, d.E);
    if (m->tp_rank == 0) m->k->axpy(dln, sc.dx2, (size_t)(N * C), 1.0f);
    return plait_tp_grad_sum(m, dln, "before the router and experts", layer);
}

plait_status plait_moe_act_rerun(plait_model *m, model_slot *s, int32_t layer) {
    const moe_dims d = plait_moe_dims(m);
    const moe_acts *a = s->moe ? &s->moe[layer - 1] : NULL;
    const int held = s->moe_held && s->moe_held[layer - 1];
    if (!a || !a->logits || (m->ep > 1 && !held))
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "model: recompute of %s's experts before their forward",
                               plait_model_layer_name(m, layer));
    /* the forward's own calls over the same spans (plait_moe_mlp_forward,
     * plait_moe_group_forward): the same bits */
    if (d.bf) plait_moe_bf16_act(m, &d, a->sh, a->su, a->sa, d.N, d.SF);
    else plait_moe_act_forward(m, &d, a->sh, a->su, a->sa, d.N * d.SF);
    if (m->ep > 1) return plait_moe_ep_act_rerun(m, s, layer, &d);
    if (d.bf) plait_moe_bf16_act(m, &d, a->h, a->u, a->a, a->hoff[d.E], d.F);
    else plait_moe_act_forward(m, &d, a->h, a->u, a->a, a->hoff[d.E] * d.F);
    return PLAIT_OK;
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
                                         float *dr, bwd_part part, const block_grads *kept) {
    block_acts *a = &s->blocks[layer - 1];
    float *p[2] = {NULL, NULL}, *g[2] = {NULL, NULL};
    const int32_t first = desc_block_param(m->desc, layer - 1, BP_LN2_W);
    plait_status st = PLAIT_OK;
    if (part & BWD_INPUT) st = plait_model_tensors(m, PARAM_DATA, layer, first, 2, p);
    if (st == PLAIT_OK && (part & BWD_WEIGHT)) st = plait_model_tensors(m, PARAM_GRAD, layer, first, 2, g);
    const float *ln = a->ln2;
    if (st == PLAIT_OK) st = plait_tp_norm_full(m, a->ln2, &ln, "before the router's weight gradient", layer);
    if (st == PLAIT_OK) st = plait_moe_backward(m, s, layer, ln, dy, m->s_dln, part);
    if (st != PLAIT_OK) return st;
    norm_grads ng = plait_tp_norm_grads(m, g[0], g[1]);
    if (part == BWD_WEIGHT) { /* ln_2's parameters from the gradient the input half kept */
        m->k->layernorm_backward(NULL, ng.w, ng.b, kept->dln2, r, NULL, a->ln2_mean, a->ln2_rstd, m->R, m->C);
        return plait_tp_norm_grads_sum(m, &ng, layer);
    }
    if (part == BWD_INPUT) plait_model_keep(m, kept->dln2, m->s_dln, (size_t)(m->R * m->C));
    m->k->copy(dr, dy, (size_t)(m->R * m->C));
    m->k->layernorm_backward(dr, ng.w, ng.b, m->s_dln, r, p[0], a->ln2_mean, a->ln2_rstd, m->R, m->C);
    return plait_tp_norm_grads_sum(m, &ng, layer); /* the input half: nothing to add */
}
