/*
 * Tensor parallelism's conjugate operators as the layer bodies call them,
 * Megatron-LM's f and g, with or without sequence parallelism
 * (plait_tp_ops.sequence_parallel):
 *
 *   where                          tp                      tp + sequence parallelism
 *   before a column-parallel       nothing                 all-gather of the norm's R rows
 *     product (forward)
 *   after a row-parallel product   all-reduce (g)          reduce-scatter into R rows
 *   backward of the first          nothing                 all-gather of the output gradient
 *   backward of the second         all-reduce (f)          reduce-scatter into R rows
 *
 * A block norm's output stays split in the slot (R rows): the products
 * read it all-gathered into the one buffer sp_ln, which every block and
 * slot share, gathered again in the backward before the column-parallel
 * product's weight gradient (Megatron-LM's sequence parallelism keeps it
 * so too; Korthikanti et al. count it at s/tp rows).
 *
 * R = m->R, the rows of the (B·T, C) residual stream this rank holds: all
 * B·T without sequence parallelism, B·T/tp with it (rank r's rows start
 * at m->row0 = r·R). A norm's parameters see only R rows under sequence
 * parallelism, so their gradients are partial sums that one more
 * all-reduce completes (plait_tp_norm_grads*); every other gradient is
 * computed from full (gathered) tensors, as without it.
 *
 * In a one-pass backward a column-parallel product's input-gradient sum
 * travels while the product's weight gradient is computed, where the plan's
 * operators allow it (plait_tp_grad_sum_start/_end; [parallel.tp] overlap):
 * Megatron-LM's asynchronous tensor-parallel reduction, the same sums in
 * the same order as the blocking call's; and under sequence parallelism a
 * norm's output gathered again travels while the products before that
 * weight gradient run (plait_tp_norm_full_start/_end).
 *
 * One thread drives a model (model_internal.h); these calls are collective
 * over the TP group, every rank making them in the same order.
 */
#include <stdio.h>

#include "model/model_bodies.h"

static plait_status tp_fail(plait_model *m, plait_status st, const char *op, const char *where, int32_t layer) {
    char what[160];
    snprintf(what, sizeof what, "%s %s", op, where);
    return plait_model_tp_error(m, st, what, layer);
}

float *plait_tp_local(plait_model *m, float *full) { return m->sp ? m->sp_local : full; }

plait_status plait_tp_gather(plait_model *m, const float *local, float *full, const char *where, int32_t layer) {
    tp_pending pend;
    plait_status st = plait_tp_gather_start(m, local, full, 0, where, layer, &pend);
    return st == PLAIT_OK ? plait_tp_gather_end(m, &pend) : st;
}

plait_status plait_tp_norm_full(plait_model *m, const float *rows, const float **full, const char *where,
                                int32_t layer) {
    tp_pending pend;
    plait_status st = plait_tp_norm_full_start(m, rows, 0, where, layer, &pend);
    return st == PLAIT_OK ? plait_tp_norm_full_end(m, &pend, full) : st;
}

plait_status plait_tp_gather_start(plait_model *m, const float *local, float *full, int overlap, const char *where,
                                   int32_t layer, tp_pending *p) {
    *p = (tp_pending){.where = where, .layer = layer, .rows = local};
    if (!m->sp) return PLAIT_OK;
    const plait_tp_ops *tp = m->tp_ops;
    plait_status st = tp->allgather(tp->ctx, local, full, (size_t)(m->R * m->C), overlap ? &p->req : NULL);
    if (st != PLAIT_OK) {
        p->req = NULL;
        return tp_fail(m, st, "all-gather", where, layer);
    }
    return PLAIT_OK;
}

plait_status plait_tp_gather_end(plait_model *m, tp_pending *p) {
    if (!p->req) return PLAIT_OK;
    const plait_tp_ops *tp = m->tp_ops;
    plait_status st = tp->wait(tp->ctx, p->req);
    p->req = NULL;
    return st == PLAIT_OK ? PLAIT_OK : tp_fail(m, st, "all-gather", p->where, p->layer);
}

plait_status plait_tp_norm_full_start(plait_model *m, const float *rows, int overlap, const char *where, int32_t layer,
                                      tp_pending *p) {
    return plait_tp_gather_start(m, rows, m->sp_ln, overlap, where, layer, p);
}

plait_status plait_tp_norm_full_end(plait_model *m, tp_pending *p, const float **full) {
    *full = m->sp ? m->sp_ln : p->rows;
    return plait_tp_gather_end(m, p);
}

float *plait_tp_partial(plait_model *m, float *out) { return m->sp ? m->sp_full : out; }

plait_status plait_tp_sum(plait_model *m, float *partial, float *out, const char *where, int32_t layer) {
    const plait_tp_ops *tp = m->tp_ops;
    if (!tp) return PLAIT_OK;
    const size_t rc = (size_t)(m->R * m->C);
    plait_status st = m->sp ? tp->reduce_scatter(tp->ctx, partial, out, rc, NULL) : tp->exit_forward(tp->ctx, out, rc);
    return st == PLAIT_OK ? PLAIT_OK : tp_fail(m, st, m->sp ? "reduce-scatter" : "all-reduce", where, layer);
}

plait_status plait_tp_grad_full(plait_model *m, const float *d, const float **full, const char *where, int32_t layer) {
    *full = d;
    if (!m->sp) return PLAIT_OK;
    const plait_tp_ops *tp = m->tp_ops;
    plait_status st = tp->allgather(tp->ctx, d, m->sp_full, (size_t)(m->R * m->C), NULL);
    if (st != PLAIT_OK) return tp_fail(m, st, "all-gather of the gradient", where, layer);
    *full = m->sp_full;
    return PLAIT_OK;
}

static const char *grad_sum_op(const plait_model *m) {
    return m->sp ? "reduce-scatter of the gradient" : "all-reduce of the gradient";
}

/* The sum of a column-parallel product's input gradient `d` posted: with
 * `overlap` as a request in p->req (NULL when done at once), else
 * blocking; plait_tp_grad_sum_end finishes either. */
static plait_status grad_sum_post(plait_model *m, float *d, const char *where, int32_t layer, int overlap,
                                  tp_pending *p) {
    *p = (tp_pending){.where = where, .layer = layer}; /* d NULL: nothing for _end */
    const plait_tp_ops *tp = m->tp_ops;
    if (!tp) return PLAIT_OK;
    const size_t rc = (size_t)(m->R * m->C);
    void **req = overlap ? &p->req : NULL;
    plait_status st = m->sp     ? tp->reduce_scatter(tp->ctx, d, m->sp_local, rc, req)
                      : overlap ? tp->enter_backward_start(tp->ctx, d, rc, req)
                                : tp->enter_backward(tp->ctx, d, rc);
    if (st != PLAIT_OK) {
        p->req = NULL;
        return tp_fail(m, st, grad_sum_op(m), where, layer);
    }
    p->d = d;
    return PLAIT_OK;
}

plait_status plait_tp_grad_sum(plait_model *m, float *d, const char *where, int32_t layer) {
    tp_pending pend;
    plait_status st = grad_sum_post(m, d, where, layer, 0, &pend);
    return st == PLAIT_OK ? plait_tp_grad_sum_end(m, &pend) : st;
}

plait_status plait_tp_grad_sum_start(plait_model *m, float *d, const char *where, int32_t layer, tp_pending *p) {
    return grad_sum_post(m, d, where, layer, m->tp_overlap, p);
}

plait_status plait_tp_grad_sum_end(plait_model *m, tp_pending *p) {
    if (!p->d) return PLAIT_OK;
    const plait_tp_ops *tp = m->tp_ops;
    plait_status st = p->req ? tp->wait(tp->ctx, p->req) : PLAIT_OK;
    p->req = NULL;
    float *d = p->d;
    p->d = NULL;
    if (st != PLAIT_OK) return tp_fail(m, st, grad_sum_op(m), p->where, p->layer);
    if (m->sp) m->k->copy(d, m->sp_local, (size_t)(m->R * m->C)); /* this rank's rows where the callers read them */
    return PLAIT_OK;
}

norm_grads plait_tp_norm_grads(plait_model *m, float *w, float *b) {
    if (!m->sp || (!w && !b)) return (norm_grads){.w = w, .b = b};
    const size_t C = (size_t)m->C;
    m->k->zero(m->sp_wg, 2 * C);
    return (norm_grads){.w = w ? m->sp_wg : NULL, .b = b ? m->sp_wg + C : NULL, .acc_w = w, .acc_b = b};
}

plait_status plait_tp_norm_grads_sum(plait_model *m, const norm_grads *g, int32_t layer) {
    if (!g->acc_w && !g->acc_b) return PLAIT_OK;
    const plait_tp_ops *tp = m->tp_ops;
    const size_t C = (size_t)m->C;
    plait_status st = tp->reduce_sum(tp->ctx, m->sp_wg, 2 * C);
    if (st != PLAIT_OK) return tp_fail(m, st, "all-reduce", "of a norm's parameter gradients", layer);
    if (g->acc_w) m->k->axpy(g->acc_w, m->sp_wg, C, 1.0f);
    if (g->acc_b) m->k->axpy(g->acc_b, m->sp_wg + C, C, 1.0f);
    return PLAIT_OK;
}

plait_status plait_tp_heads_sum(plait_model *m, float *d, size_t n, const char *what, int32_t layer) {
    const plait_tp_ops *tp = m->tp_ops;
    if (!tp) return PLAIT_OK;
    plait_status st = tp->reduce_sum(tp->ctx, d, n);
    return st == PLAIT_OK ? PLAIT_OK : tp_fail(m, st, "all-reduce", what, layer);
}

/* dst[n] = src[n] widened to float32: rows of k values times the k x k
 * identity, each output one product by 1 plus zeros, exact (the kernel
 * table has no widening entry; a NaN or an infinity spreads to its row's
 * other k - 1 values: such a gradient is lost whatever follows). */
void plait_tp_widen(plait_model *m, float *dst, const plait_bf16 *src, int64_t n) {
    int64_t k = 8;
    while (n % k) k /= 2;
    m->k->matmul_forward_residual_bf16(dst, NULL, src, m->unit + PLAIT_UNIT_AT(k), NULL, n / k, k, k);
}
