/*
 * The mixture of experts' products on bf16 rows (moe_internal.h; where
 * plait_model.moe_bf16): as moe_experts.c's, with the permuted rows, the
 * experts' hidden tensors and outputs and their gradients in bf16, the
 * products reading the bf16 copy of the experts' weights (model_bf16.c) with
 * float32 accumulation and float32 weight gradients (the kernel table's
 * bf16 grouped product, ABI 1.29), as Megatron-Core runs its experts. The
 * shared experts are the grouped product over one expert and every token.
 *
 * The GPT's expert: c_fc (with its bias) into h, GELU into u
 * (gelu_forward_bf16, the call selective recomputation rebuilds u with),
 * c_proj; its backward applies GELU's derivative inside c_proj's input
 * gradient (matmul_backward_gelu_bf16's form). The Llama family's: gate
 * and up into one [rows,2F] buffer side by side, as swiglu_forward_bf16
 * reads them (the grouped product's row stride), down from SwiGLU's
 * output. Its input gradient is the sum of the gate's and the up's,
 * which lie in two tensors (no single [2F,C] weight a product could
 * read): each rounded to bf16, widened, added in float32 and rounded
 * again (Megatron-LM's one fc1 product rounds once; the difference is
 * within bf16's rounding of each).
 */
#include "model/moe_internal.h"

mlp_wbf plait_moe_bf16_w(const plait_model *m, const moe_dims *d, int32_t layer, int64_t e0) {
    const int32_t first = m->desc->moe_first[layer - 1] + MOE_EXPERTS + (e0 < 0 ? d->nt : 0);
    const int64_t i = e0 < 0 ? 0 : e0, C = d->C, F = d->F;
    plait_bf16 *const *t = m->wbf + first;
    if (d->nt == MOE_LLAMA_TENSORS) return (mlp_wbf){{t[0] + i * F * C, t[1] + i * F * C, t[2] + i * C * F, NULL}};
    return (mlp_wbf){{t[0] + i * F * C, t[1] + i * F, t[2] + i * C * F, t[3] + i * C}};
}

void plait_moe_bf16_act(plait_model *m, const moe_dims *d, const float *h, float *u, float *a, int64_t rows,
                        int64_t F) {
    if (rows == 0 || F == 0) return;
    if (d->nt == MOE_LLAMA_TENSORS) m->k->swiglu_forward_bf16(MOE_BF(a), MOE_BF(h), rows, F);
    else m->k->gelu_forward_bf16(MOE_BF(u), MOE_BF(h), (size_t)(rows * F));
}

void plait_moe_bf16_group_forward(plait_model *m, const moe_dims *d, const mlp_wbf *w, const int32_t *off, int64_t E,
                                  int64_t F, const float *x, float *h, float *u, float *a, float *y) {
    const int64_t C = d->C, rows = off[E];
    if (rows == 0) return;
    const plait_bf16 *xb = MOE_BF(x);
    plait_bf16 *hb = MOE_BF(h);
    if (d->nt == MOE_LLAMA_TENSORS) { /* gate|up side by side, SwiGLU, down */
        m->k->moe_matmul_forward_bf16(hb, 2 * F, xb, w->w[0], NULL, off, E, C, F);
        m->k->moe_matmul_forward_bf16(hb + F, 2 * F, xb, w->w[1], NULL, off, E, C, F);
        plait_moe_bf16_act(m, d, h, u, a, rows, F);
        m->k->moe_matmul_forward_bf16(MOE_BF(y), C, MOE_BF(a), w->w[2], NULL, off, E, F, C);
        return;
    }
    m->k->moe_matmul_forward_bf16(hb, F, xb, w->w[0], w->w[1], off, E, C, F); /* c_fc */
    plait_moe_bf16_act(m, d, h, u, a, rows, F);
    /* c_proj; its bias once over the tp group: the partial sums' first rank's */
    m->k->moe_matmul_forward_bf16(MOE_BF(y), C, MOE_BF(u), w->w[2], m->tp_rank == 0 ? w->w[3] : NULL, off, E, F, C);
}

void plait_moe_bf16_group_backward(plait_model *m, const moe_dims *d, const mlp_wbf *w, const mlp_w *g,
                                   const int32_t *off, int64_t E, int64_t F, const float *x, const float *h,
                                   const float *u, const float *a, const plait_bf16 *dy, plait_bf16 *dx,
                                   const moe_scratch *sc) {
    const int64_t C = d->C, rows = off[E];
    if (rows == 0) return;
    const plait_bf16 *xb = MOE_BF(x);
    plait_bf16 *d1 = MOE_BF(sc->d1), *d2 = MOE_BF(sc->d2);
    if (d->nt == MOE_LLAMA_TENSORS) {
        plait_bf16 *dg = MOE_BF(sc->gu_dx), *du = dg + rows * C;
        m->k->moe_matmul_backward_bf16(d1, g->w2, NULL, dy, C, MOE_BF(a), w->w[2], NULL, off, E, F, C);
        m->k->swiglu_backward_bf16(d2, d1, MOE_BF(h), rows, F); /* d2: [rows,2F], the gate's then up's */
        m->k->moe_matmul_backward_bf16(dg, g->w1, NULL, d2, 2 * F, xb, w->w[0], NULL, off, E, C, F);
        m->k->moe_matmul_backward_bf16(du, g->w3, NULL, d2 + F, 2 * F, xb, w->w[1], NULL, off, E, C, F);
        m->k->from_bf16(sc->dx, dg, (size_t)(rows * C));
        m->k->from_bf16(sc->dx2, du, (size_t)(rows * C));
        m->k->axpy(sc->dx, sc->dx2, (size_t)(rows * C), 1.0f);
        m->k->to_bf16(dx, sc->dx, (size_t)(rows * C));
        return;
    }
    /* c_proj's input gradient with GELU's derivative: c_fc's output gradient */
    m->k->moe_matmul_backward_bf16(d1, g->w2, g->b2, dy, C, MOE_BF(u), w->w[2], MOE_BF(h), off, E, F, C);
    m->k->moe_matmul_backward_bf16(dx, g->w1, g->b1, d1, F, xb, w->w[0], NULL, off, E, C, F);
}

void plait_moe_bf16_group_weight(plait_model *m, const moe_dims *d, const mlp_w *g, const int32_t *off, int64_t E,
                                 int64_t F, const float *x, const float *u, const float *a, const plait_bf16 *dy,
                                 const plait_bf16 *d1) {
    const int64_t C = d->C;
    if (off[E] == 0) return;
    /* plait_moe_bf16_group_backward's products, their input gradients
     * left out (dinp NULL: the weight and GELU's input unread) */
    if (d->nt == MOE_LLAMA_TENSORS) {
        m->k->moe_matmul_backward_bf16(NULL, g->w2, NULL, dy, C, MOE_BF(a), NULL, NULL, off, E, F, C);
        m->k->moe_matmul_backward_bf16(NULL, g->w1, NULL, d1, 2 * F, MOE_BF(x), NULL, NULL, off, E, C, F);
        m->k->moe_matmul_backward_bf16(NULL, g->w3, NULL, d1 + F, 2 * F, MOE_BF(x), NULL, NULL, off, E, C, F);
        return;
    }
    m->k->moe_matmul_backward_bf16(NULL, g->w2, g->b2, dy, C, MOE_BF(u), NULL, NULL, off, E, F, C);
    m->k->moe_matmul_backward_bf16(NULL, g->w1, g->b1, d1, F, MOE_BF(x), NULL, NULL, off, E, C, F);
}

void plait_moe_shared_forward(plait_model *m, const moe_dims *d, int32_t layer, float *const *t, moe_acts *a,
                              const float *ln) {
    if (!d->bf) {
        const mlp_w w = plait_moe_expert_w(d, t, -1);
        plait_moe_mlp_forward(m, d, &w, ln, a->sh, a->su, a->sa, a->sy, d->N, d->SF);
        return;
    }
    const int32_t off[2] = {0, (int32_t)d->N};
    const mlp_wbf w = plait_moe_bf16_w(m, d, layer, -1);
    m->k->to_bf16(MOE_BF(a->sx), ln, (size_t)(d->N * d->C));
    plait_moe_bf16_group_forward(m, d, &w, off, 1, d->SF, a->sx, a->sh, a->su, a->sa, a->sy);
}
