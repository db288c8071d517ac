/*
 * The mixture of experts' products (moe_internal.h): one MLP (an expert
 * run alone, or the shared experts), the architecture's (the GPT's c_fc,
 * GELU, c_proj with biases; the Llama family's gate, up, SwiGLU, down),
 * and the routed experts grouped, each expert's product one of the
 * kernel table's grouped entry's (ABI 1.21). Under tp each runs its slice
 * of the width, the row-parallel bias added on the group's first rank
 * only (the partial sums' first).
 */
#include "device/device.h"
#include "model/moe_internal.h"

/* Expert e's slices of the stacked tensors t[MOE_EXPERTS..]; e = -1: the
 * shared experts' tensors after them. */
mlp_w plait_moe_expert_w(const moe_dims *d, float *const *t, int64_t e) {
    float *const *x = t + MOE_EXPERTS + (e < 0 ? d->nt : 0);
    const int64_t i = e < 0 ? 0 : e, C = d->C, F = d->F;
    if (d->nt == MOE_LLAMA_TENSORS)
        return (mlp_w){.w1 = x[0] + i * F * C, .w3 = x[1] + i * F * C, .w2 = x[2] + i * C * F};
    return (mlp_w){.w1 = x[0] + i * F * C, .b1 = x[1] + i * F, .w2 = x[2] + i * C * F, .b2 = x[3] + i * C};
}

/* The activation function over n floats: gpt u = GELU(h), llama a =
 * SwiGLU(h, u); the one call the forward and plait_moe_act_rerun make. */
void plait_moe_act_forward(plait_model *m, const moe_dims *d, const float *h, float *u, float *a, int64_t n) {
    if (n == 0) return;
    if (d->nt == MOE_LLAMA_TENSORS) m->k->swiglu_forward(a, h, u, (size_t)n);
    else m->k->gelu_forward(u, h, (size_t)n);
}

/* y [n,C] = the MLP of x [n,C], width F, keeping h, u (and a) [n,F]. */
void plait_moe_mlp_forward(plait_model *m, const moe_dims *d, const mlp_w *w, const float *x, float *h, float *u,
                           float *a, float *y, int64_t n, int64_t F) {
    const int64_t C = d->C;
    if (n == 0) return;
    m->k->matmul_forward(h, x, w->w1, w->b1, n, C, F);
    if (d->nt == MOE_LLAMA_TENSORS) {
        m->k->matmul_forward(u, x, w->w3, NULL, n, C, F);
        plait_moe_act_forward(m, d, h, u, a, n * F);
        m->k->matmul_forward(y, a, w->w2, NULL, n, F, C);
        return;
    }
    plait_moe_act_forward(m, d, h, u, a, n * F);
    /* c_proj's bias once over the tp group: the partial sums' first rank's */
    m->k->matmul_forward(y, u, w->w2, m->tp_rank == 0 ? w->b2 : NULL, n, F, C);
}

/* dx [n,C] (overwritten) from dy [n,C], the weights' gradients added to
 * g; d1..d3 [n,F] scratch, dx2 [n,C] scratch (llama). */
void plait_moe_mlp_backward(plait_model *m, const moe_dims *d, const mlp_w *w, const mlp_w *g, const float *x,
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

void plait_moe_mlp_weight(plait_model *m, const moe_dims *d, const mlp_w *g, const float *x, const float *u,
                          const float *a, const float *dy, const float *d2, const float *d3, int64_t n, int64_t F) {
    const int64_t C = d->C;
    if (n == 0) return;
    /* plait_moe_mlp_backward's calls, their input gradients left out */
    if (d->nt == MOE_LLAMA_TENSORS) {
        m->k->matmul_backward(NULL, g->w2, NULL, dy, a, NULL, n, F, C);
        m->k->matmul_backward(NULL, g->w1, NULL, d2, x, NULL, n, C, F);
        m->k->matmul_backward(NULL, g->w3, NULL, d3, x, NULL, n, C, F);
        return;
    }
    m->k->matmul_backward(NULL, g->w2, g->b2, dy, u, NULL, n, F, C);
    m->k->matmul_backward(NULL, g->w1, g->b1, d2, x, NULL, n, C, F);
}

/* ---- the routed experts, grouped ------------------------------------------- */

/* The routed experts' MLPs over their rows x [off[E],C] (off: host
 * memory), each expert's product one of the grouped entry's: the bits of
 * one mlp_forward an expert. */
void plait_moe_group_forward(plait_model *m, const moe_dims *d, float *const *t, const int32_t *off, const float *x,
                             float *h, float *u, float *a, float *y) {
    float *const *w = t + MOE_EXPERTS;
    const int64_t C = d->C, F = d->F, E = d->E, rows = off[E];
    if (rows == 0) return;
    if (d->nt == MOE_LLAMA_TENSORS) { /* gate, up, down */
        m->k->moe_matmul_forward(h, x, w[0], NULL, off, E, C, F);
        m->k->moe_matmul_forward(u, x, w[1], NULL, off, E, C, F);
        plait_moe_act_forward(m, d, h, u, a, rows * F);
        m->k->moe_matmul_forward(y, a, w[2], NULL, off, E, F, C);
        return;
    }
    m->k->moe_matmul_forward(h, x, w[0], w[1], off, E, C, F); /* c_fc */
    plait_moe_act_forward(m, d, h, u, a, rows * F);
    /* c_proj; its bias once over the tp group: the partial sums' first rank's */
    m->k->moe_matmul_forward(y, u, w[2], m->tp_rank == 0 ? w[3] : NULL, off, E, F, C);
}

/* Their backward: sc->dx [off[E],C] (overwritten) from sc->dy, the
 * weights' gradients added to g's expert slices. */
void plait_moe_group_backward(plait_model *m, const moe_dims *d, float *const *t, float *const *g, const int32_t *off,
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

void plait_moe_group_weight(plait_model *m, const moe_dims *d, float *const *g, const int32_t *off, const moe_acts *a) {
    float *const *gw = g + MOE_EXPERTS;
    const int64_t C = d->C, F = d->F, E = d->E;
    if (off[E] == 0) return;
    /* plait_moe_group_backward's products, their input gradients left out */
    if (d->nt == MOE_LLAMA_TENSORS) {
        m->k->moe_matmul_backward(NULL, gw[2], NULL, a->krdy, a->a, NULL, off, E, F, C);
        m->k->moe_matmul_backward(NULL, gw[0], NULL, a->krd2, a->x, NULL, off, E, C, F);
        m->k->moe_matmul_backward(NULL, gw[1], NULL, a->krd3, a->x, NULL, off, E, C, F);
        return;
    }
    m->k->moe_matmul_backward(NULL, gw[2], gw[3], a->krdy, a->u, NULL, off, E, F, C);
    m->k->moe_matmul_backward(NULL, gw[0], gw[1], a->krd2, a->x, NULL, off, E, C, F);
}
