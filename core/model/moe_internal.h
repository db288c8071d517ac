/*
 * What the mixture of experts' files of core/model share: a sparse
 * block's kept activations (moe_acts), its sizes (moe_dims), the
 * backward's scratch (moe_scratch), one MLP's weights (mlp_w), the
 * experts' products (moe_experts.c) and expert parallelism's trades
 * (moe_ep.c), which moe.c's forward and backward call. Private to
 * core/model. Not thread-safe: the thread that drives the model calls
 * them; device pointers are the open device's, owned by the model or its
 * slots (model_internal.h), and live until the model is freed.
 */
#ifndef PLAIT_CORE_MOE_INTERNAL_H
#define PLAIT_CORE_MOE_INTERNAL_H

#include <stdint.h>

#include "model/model_internal.h"

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
    /* under a split backward (zero-bubble schedules), what the input half
     * computes and the weight half reads, kept in the slot between them
     * (model_slot.moe_mem, never a buffer the blocks share): the
     * gradients at the outputs of the block's products */
    float *kdy;         /* [N,C] the block's output gradient, every token (the shared experts' last product) */
    float *kdlogits;    /* [N,E] the router's logits' */
    float *krdy;        /* [N·k,C] each permuted row's output gradient (c_proj, down) */
    float *krd2, *krd3; /* [N·k,F] c_fc's through the GELU (gpt); gate's and up's (llama) */
    float *ksd2, *ksd3; /* [N,SF] the same for the shared experts */
    float *sx;          /* moe_dims.bf: [N,C] the shared experts' input, the norm's output in bf16 */
    /* moe_dims.bf: x .. sy hold bf16 (MOE_BF), and the llama arch's h
     * holds gate|up side by side, [N·k,2F] (sh: [N,2SF]), u and su unused */
} moe_acts;

typedef struct moe_dims {
    int64_t N, C, E, k, F, SF;
    int nt;  /* expert tensors: MOE_GPT_TENSORS or MOE_LLAMA_TENSORS */
    int sel; /* recompute = selective: the activation function's outputs shared (drops_act) */
    int split; /* the backward runs in two halves: moe_acts' k* fields kept */
    int bf;    /* the experts run bf16 (plait_model.moe_bf16): their rows and hidden tensors bf16 */
} moe_dims;

/* The bf16 values a float pointer of moe_acts, moe_scratch or the held
 * rows stands for where moe_dims.bf: those buffers are carved in floats
 * and hold bf16 when the experts run bf16, each 16-byte aligned. */
#define MOE_BF(p) ((plait_bf16 *)(void *)(p))

/* p advanced by n elements: floats, or bf16 values where d->bf. */
static inline float *plait_moe_at(const moe_dims *d, float *p, int64_t n) {
    return d->bf ? (float *)(void *)(MOE_BF(p) + n) : p + n;
}

/* The sizes of this rank's sparse blocks (every one has the same). */
static inline moe_dims plait_moe_dims(const plait_model *m) {
    const moe_desc *md = &m->desc->moe;
    return (moe_dims){.N = m->B * m->T,
                      .C = m->C,
                      .E = md->experts,
                      .k = md->top_k,
                      .F = md->ffn / m->tp, /* this tp rank's slice of each expert's width */
                      .SF = (int64_t)md->shared * md->ffn / m->tp,
                      .nt = m->desc->is_llama ? MOE_LLAMA_TENSORS : MOE_GPT_TENSORS,
                      .sel = m->desc->recompute == PLAIT_RECOMPUTE_SELECTIVE,
                      .split = m->split,
                      .bf = m->moe_bf16};
}

/* The backward's scratch, shared by every sparse block and slot. */
typedef struct moe_scratch {
    double *dgate;        /* [N,k] the gates' gradients */
    float *d1, *d2, *d3;  /* [max(N·k, N·S)·F] */
    float *dy, *dx, *dx2; /* [N·k,C] */
    float *dlogits;       /* [N,E] */
    float *grads;         /* at ep > 1: each ep source's gradients of this rank's experts, [ep][ep_grad_floats] */
    /* where moe_dims.bf: the rows' output and input gradients in bf16 in
     * dy's room, each [N·k,C]; dx and dx2 float32 room for an llama
     * expert's gate and up input gradients summed; gu_dx [N·k,C] floats
     * of room for those two in bf16 (NULL for the gpt arch) */
    plait_bf16 *dyb, *dxb;
    float *gu_dx;
} moe_scratch;

/* An MLP's weights (or their gradients): gpt w1/b1 = c_fc, w2/b2 = c_proj;
 * llama w1 = gate_proj, w3 = up_proj, w2 = down_proj. */
typedef struct mlp_w {
    float *w1, *b1, *w3, *w2, *b2;
} mlp_w;

/* ---- moe_experts.c: one MLP, and the routed experts grouped ------------- */

/* Expert e's slices of the stacked tensors t[MOE_EXPERTS..]; e = -1: the
 * shared experts' tensors after them. */
mlp_w plait_moe_expert_w(const moe_dims *d, float *const *t, int64_t e);
/* The activation function over n floats: gpt u = GELU(h), llama a =
 * SwiGLU(h, u); the one call the forward and the selective rerun make. */
void plait_moe_act_forward(plait_model *m, const moe_dims *d, const float *h, float *u, float *a, int64_t n);
/* y [n,C] = the MLP of x [n,C], width F, keeping h, u (and a) [n,F]. */
void plait_moe_mlp_forward(plait_model *m, const moe_dims *d, const mlp_w *w, const float *x, float *h, float *u,
                           float *a, float *y, int64_t n, int64_t F);
/* dx [n,C] (overwritten) from dy [n,C], the weights' gradients added to
 * g; sc's d1..d3 [n,F] and dx2 [n,C] (llama) scratch. */
void plait_moe_mlp_backward(plait_model *m, const moe_dims *d, const mlp_w *w, const mlp_w *g, const float *x,
                            const float *h, const float *u, const float *a, const float *dy, float *dx, int64_t n,
                            int64_t F, const moe_scratch *sc);
/* The weight half of plait_moe_mlp_backward (split backward): g's
 * gradients from the output gradients its input half computed, dy [n,C]
 * at the last product, d2 (and llama's d3) [n,F] at the first (first two);
 * the bits the one-pass call adds. */
void plait_moe_mlp_weight(plait_model *m, const moe_dims *d, const mlp_w *g, const float *x, const float *u,
                          const float *a, const float *dy, const float *d2, const float *d3, int64_t n, int64_t F);
/* The routed experts' MLPs over their rows x [off[E],C] (off: host
 * memory), each expert's product one of the grouped entry's: the bits of
 * one plait_moe_mlp_forward an expert. */
void plait_moe_group_forward(plait_model *m, const moe_dims *d, float *const *t, const int32_t *off, const float *x,
                             float *h, float *u, float *a, float *y);
/* Their backward: sc->dx [off[E],C] (overwritten) from sc->dy, the
 * weights' gradients added to g's expert slices. */
void plait_moe_group_backward(plait_model *m, const moe_dims *d, float *const *t, float *const *g, const int32_t *off,
                              const moe_acts *a, const moe_scratch *sc);
/* Their weight half (split backward): the experts' gradients into g from
 * the rows' output gradients the input half kept (a->krdy, krd2, krd3). */
void plait_moe_group_weight(plait_model *m, const moe_dims *d, float *const *g, const int32_t *off, const moe_acts *a);

/* ---- moe_experts_bf16.c: the same on bf16 rows (moe_dims.bf) ------------- */

/* An MLP's bf16 weight copies (model_bf16.c's), stacked over E experts as t's
 * tensors are, from the first expert of the set: gpt w[0..3] = c_fc w,
 * c_fc b, c_proj w, c_proj b; llama w[0..2] = gate, up, down. */
typedef struct mlp_wbf {
    const plait_bf16 *w[MOE_GPT_TENSORS];
} mlp_wbf;
/* The bf16 copies of block `layer`'s routed experts (e0 = 0, or a local
 * expert of the ep group) from expert e0, or its shared experts (e0 = -1). */
mlp_wbf plait_moe_bf16_w(const plait_model *m, const moe_dims *d, int32_t layer, int64_t e0);
/* The activation over rows of width F (bf16): gpt u = GELU(h), llama a =
 * SwiGLU of h's gate|up; the one call the forward and the selective
 * rerun make. */
void plait_moe_bf16_act(plait_model *m, const moe_dims *d, const float *h, float *u, float *a, int64_t rows, int64_t F);
/* The MLPs of E experts of width F over their rows x [off[E],C] (off:
 * host memory), bf16 in and out, keeping h, u, a as moe_acts' (bf16); the
 * shared experts are E = 1 over every token. */
void plait_moe_bf16_group_forward(plait_model *m, const moe_dims *d, const mlp_wbf *w, const int32_t *off, int64_t E,
                                  int64_t F, const float *x, float *h, float *u, float *a, float *y);
/* Their backward: dx [off[E],C] (bf16, overwritten) from dy (bf16), the
 * weights' float32 gradients added to g's slices of the same experts
 * (g: an mlp_w of expert 0 of the set, stacked). Uses sc's d1, d2, dx,
 * dx2 and gu_dx, so dy and dx lie elsewhere. */
void plait_moe_bf16_group_backward(plait_model *m, const moe_dims *d, const mlp_wbf *w, const mlp_w *g,
                                   const int32_t *off, int64_t E, int64_t F, const float *x, const float *h,
                                   const float *u, const float *a, const plait_bf16 *dy, plait_bf16 *dx,
                                   const moe_scratch *sc);

/* Their weight half (split backward): g's slices from the output
 * gradients the input half kept, in bf16: dy [off[E],C] at the last
 * product, d1 at the first (gpt: c_fc's through the GELU, [off[E],F];
 * llama: the gate's and up's side by side, [off[E],2F]); the bits the
 * one-pass call adds. */
void plait_moe_bf16_group_weight(plait_model *m, const moe_dims *d, const mlp_w *g, const int32_t *off, int64_t E,
                                 int64_t F, const float *x, const float *u, const float *a, const plait_bf16 *dy,
                                 const plait_bf16 *d1);
/* The first product's output gradient plait_moe_bf16_group_backward
 * leaves in sc (bf16: gpt d1 [rows,F], llama d2 [rows,2F]) and its
 * floats' count for `rows` rows: what a split backward's input half keeps. */
static inline const float *plait_moe_bf16_first_grad(const moe_dims *d, const moe_scratch *sc) {
    return d->nt == MOE_LLAMA_TENSORS ? sc->d2 : sc->d1;
}
static inline int64_t plait_moe_bf16_first_floats(const moe_dims *d, int64_t rows, int64_t F) {
    return d->nt == MOE_LLAMA_TENSORS ? rows * F : rows * F / 2;
}

/* The shared experts' forward over every token of `ln` (float32 [N,C])
 * into a's sh .. sy: moe_experts.c's MLP, or where d->bf the bf16 one
 * from ln rounded into a->sx. */
void plait_moe_shared_forward(plait_model *m, const moe_dims *d, int32_t layer, float *const *t, moe_acts *a,
                              const float *ln);

/* ---- moe_ep.c: expert parallelism (ep > 1) ---------------------------------- */

/* Floats of the gradients of one rank's E/ep experts. */
int64_t plait_moe_ep_grad_floats(const plait_model *m, const moe_dims *d);
/* At ep > 1, a->x: the rows the dispatch sends, in the device buffer
 * every sparse block shares (grown to N·k rows when smaller), written by
 * the permutation and dead once the dispatch has completed. */
plait_status plait_moe_ep_send_rows(plait_model *m, const moe_dims *d, moe_acts *a);
/* The forward's experts at ep > 1: dispatch, each (source, local expert)
 * product, combine into a->y; the shared experts' forward of `ln` while
 * the dispatch travels. Keeps the rows it ran in the slot's moe_held. */
plait_status plait_moe_ep_forward(plait_model *m, model_slot *s, int32_t layer, const moe_dims *d, moe_acts *a,
                                  float *const *t, const float *ln);
/* The backward's experts at ep > 1: the rows' gradients to their holders,
 * each source's weight gradients apart, added over the sources in the
 * summation tree's order into g, the input gradients back into sc->dx.
 * Split (moe_dims.split): the input half trades both ways and keeps the
 * held rows' output gradients beside them (g unread); the weight half
 * trades nothing, adds the sources' gradients from what was kept, and
 * reads neither t nor sc->dy. */
plait_status plait_moe_ep_backward(plait_model *m, model_slot *s, int32_t layer, const moe_dims *d, const moe_acts *a,
                                   float *const *t, float *const *g, const moe_scratch *sc, bwd_part part);
/* recompute = selective at ep > 1: the held rows' activation function
 * outputs rebuilt (before the block's backward). */
plait_status plait_moe_ep_act_rerun(plait_model *m, model_slot *s, int32_t layer, const moe_dims *d);
/* Block `layer`'s held rows freed, host and device (none: nothing to do). */
void plait_moe_held_drop(plait_model *m, model_slot *s, int32_t layer);

#endif
