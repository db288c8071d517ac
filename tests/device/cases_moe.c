/*
 * Kernel cases of the mixture of experts' entries (plait/kernels.h, ABI
 * 1.21), run in every precision against the core's CPU kernels: the
 * routing and the row moves bit for bit (the choices, the rows, the
 * offsets, the permuted and combined rows, the gates' gradients), what
 * goes through exp and log (scores, log-sum-exps, gates, the router's
 * gradient) within 1e-5, the grouped product within the precision's
 * product tolerance. Softmax and sigmoid routers, k of 1, 2 and 3, a
 * capacity that drops routes, and an expert no token chooses (its
 * product skipped, its weight gradient untouched).
 *
 * Their bf16-activation forms (ABI 1.29, kc_moe_bf16_cases, run in bf16
 * mode against kref_bf16.h's references): the permuted rows rounded once
 * and every row move and float32 sum bit for bit (the widening is exact,
 * the order fixed), the grouped product's bf16 outputs within bf16's
 * bound and its float32 weight gradients within the product tolerance,
 * an output whose rows lie wider apart (an llama expert's gate and up
 * side by side) and GELU's derivative on the input gradient.
 */
#include <math.h>
#include <stdlib.h>

#include "device/kcase.h"

#define N 67 /* tokens */
#define E 6  /* experts; the last one never chosen (its selection bias) */
#define CW 40
#define F 24

typedef struct moe_shape {
    int64_t k;
    int sigmoid;
    double capacity; /* moe_capacity; 0 dropless */
} moe_shape;

/* What the routing produced (device memory) and its host offsets. */
typedef struct routed {
    float *scores, *lse, *gate, *counts, *x;
    int32_t *idx, *row, *tok, *off, *hoff;
} routed;

static routed route(kc_ctx *x, const moe_shape *s) {
    const float *inp = kc_rand(x, N * CW, -1, 1);
    const int64_t k = s->k, cap = s->capacity > 0 ? (int64_t)ceil(s->capacity * (double)(N * k) / E) : N * k;
    float hb[E];
    for (int e = 0; e < E; e++) hb[e] = e == E - 1 ? -10.0f : 0.05f * (float)(e % 3);
    routed r;
    const float *logits = kc_rand(x, N * E, -3, 3), *bias = kc_bytes(x, hb, sizeof hb);
    r.scores = kc_out(x, N * E);
    r.lse = kc_out(x, N);
    r.gate = kc_out(x, (size_t)(N * k));
    r.idx = (int32_t *)(void *)kc_out(x, (size_t)(N * k));
    x->k->moe_route(r.scores, r.lse, r.idx, r.gate, logits, bias, N, E, k, s->sigmoid);
    r.row = (int32_t *)(void *)kc_out(x, (size_t)(N * k));
    r.tok = (int32_t *)(void *)kc_out(x, (size_t)(N * k));
    r.off = (int32_t *)(void *)kc_out(x, E + 1);
    r.counts = kc_out(x, E);
    r.x = kc_out(x, (size_t)(N * k * CW));
    x->k->moe_permute(r.row, r.tok, r.off, r.counts, r.x, r.idx, inp, N, E, k, CW, cap);
    r.hoff = kc_host_copy(x, r.off, (E + 1) * sizeof(int32_t));
    return r;
}

static void forward_at(kc_ctx *x, const moe_shape *s, const routed r) {
    const int64_t k = s->k, rows = r.hoff[E];
    kc_result(x, "route scores", r.scores, N * E, KC_ELEMWISE);
    kc_result(x, "route lse", r.lse, N, KC_ELEMWISE);
    kc_result(x, "route idx", r.idx, (size_t)(N * k), KC_EXACT);
    kc_result(x, "route gates", r.gate, (size_t)(N * k), KC_ELEMWISE);
    kc_result(x, "permute row", r.row, (size_t)(N * k), KC_EXACT);
    kc_result(x, "permute tok", r.tok, (size_t)rows, KC_EXACT);
    kc_result(x, "permute off", r.off, E + 1, KC_EXACT);
    kc_result(x, "permute routed", r.counts, E, KC_EXACT);
    kc_result(x, "permute rows", r.x, (size_t)(rows * CW), KC_EXACT);
    /* the grouped product over the rows, with and without biases */
    const float *w = kc_rand(x, E * F * CW, -0.5f, 0.5f), *b = kc_rand(x, E * F, -1, 1);
    float *h = kc_out(x, (size_t)(N * k * F)), *hn = kc_out(x, (size_t)(N * k * F));
    x->k->moe_matmul_forward(h, r.x, w, b, r.hoff, E, CW, F);
    x->k->moe_matmul_forward(hn, r.x, w, NULL, r.hoff, E, CW, F);
    kc_result(x, "grouped product +bias", h, (size_t)(rows * F), KC_GEMM);
    kc_result(x, "grouped product", hn, (size_t)(rows * F), KC_GEMM);
    /* the combine, beside the residual and the shared experts, and in place */
    const float *y = kc_rand(x, (size_t)(N * k * CW), -1, 1), *sh = kc_rand(x, N * CW, -1, 1);
    float *res = kc_rand(x, N * CW, -1, 1), *out = kc_out(x, N * CW);
    x->k->moe_unpermute(out, res, sh, y, r.row, r.gate, N, k, CW);
    kc_result(x, "unpermute", out, N * CW, KC_EXACT);
    x->k->moe_unpermute(res, res, NULL, y, r.row, r.gate, N, k, CW);
    kc_result(x, "unpermute in place, no shared", res, N * CW, KC_EXACT);
}

static void backward_at(kc_ctx *x, const moe_shape *s, const routed r) {
    const int64_t k = s->k, rows = r.hoff[E];
    const float *dout = kc_rand(x, N * CW, -1, 1), *y = kc_rand(x, (size_t)(N * k * CW), -1, 1);
    float *dys = kc_out(x, (size_t)(N * k * CW));
    double *dgate = (double *)(void *)kc_out(x, (size_t)(2 * N * k));
    x->k->moe_unpermute_backward(dys, dgate, dout, y, r.row, r.gate, N, k, CW);
    kc_result(x, "unpermute backward rows", dys, (size_t)(rows * CW), KC_EXACT);
    kc_result(x, "unpermute backward gates", dgate, (size_t)(N * k), KC_EXACT);
    const float *logits = kc_rand(x, N * E, -3, 3);
    float *dl = kc_out(x, N * E);
    x->k->moe_route_backward(dl, dgate, logits, r.scores, r.lse, r.idx, r.gate, r.counts, N, E, k, s->sigmoid, 0.01,
                             0.001, 0.5);
    kc_result(x, "route backward", dl, N * E, KC_ELEMWISE);
    float *dinp = kc_rand(x, N * CW, -1, 1);
    x->k->moe_permute_backward(dinp, y, r.row, N, k, CW);
    kc_result(x, "permute backward +=", dinp, N * CW, KC_EXACT);
    /* the grouped product's backward: every part, then the weights' alone */
    const float *w = kc_rand(x, E * F * CW, -0.5f, 0.5f), *dh = kc_rand(x, (size_t)(N * k * F), -1, 1);
    float *dx = kc_out(x, (size_t)(N * k * CW)), *dw = kc_rand(x, E * F * CW, -1, 1), *db = kc_rand(x, E * F, -1, 1);
    float *dw2 = kc_out(x, E * F * CW);
    x->k->copy(dw2, dw, E * F * CW);
    x->k->moe_matmul_backward(dx, dw, db, dh, r.x, w, r.hoff, E, CW, F);
    kc_result(x, "grouped backward dinp", dx, (size_t)(rows * CW), KC_GEMM);
    kc_result(x, "grouped backward dweight+=", dw, E * F * CW, KC_GEMM);
    kc_result(x, "grouped backward dbias+=", db, E * F, KC_GEMM);
    x->k->moe_matmul_backward(NULL, dw2, NULL, dh, r.x, NULL, r.hoff, E, CW, F);
    kc_result(x, "grouped backward dweight alone", dw2, E * F * CW, KC_GEMM);
}

/* The routing of shape s, then its forward's (backward = 0) or its
 * backward's entries. */
static void moe_at(kc_ctx *x, const moe_shape *s, int backward) {
    KC_NEED(x, moe_route);
    KC_NEED(x, moe_matmul_backward);
    const routed r = route(x, s);
    if (backward) backward_at(x, s, r);
    else forward_at(x, s, r);
}

static const moe_shape k2 = {2, 0, 0}, k1 = {1, 1, 1.0}, k3 = {3, 0, 1.25};
static void case_moe_k2(kc_ctx *x) { moe_at(x, &k2, 0); }
static void case_moe_k2_backward(kc_ctx *x) { moe_at(x, &k2, 1); }
static void case_moe_k1_sigmoid_capacity(kc_ctx *x) { moe_at(x, &k1, 0); }
static void case_moe_k1_sigmoid_capacity_backward(kc_ctx *x) { moe_at(x, &k1, 1); }
static void case_moe_k3_capacity(kc_ctx *x) { moe_at(x, &k3, 0); }
static void case_moe_k3_capacity_backward(kc_ctx *x) { moe_at(x, &k3, 1); }

/* ---- on bf16 activations (ABI 1.29) ---- */

static void forward_bf16_at(kc_ctx *x, const moe_shape *s) {
    KC_NEED(x, moe_matmul_backward_bf16);
    const float *inp = kc_rand(x, N * CW, -1, 1);
    const int64_t k = s->k, cap = s->capacity > 0 ? (int64_t)ceil(s->capacity * (double)(N * k) / E) : N * k;
    const float *logits = kc_rand(x, N * E, -3, 3);
    float *scores = kc_out(x, N * E), *lse = kc_out(x, N), *gate = kc_out(x, (size_t)(N * k)), *counts = kc_out(x, E);
    int32_t *idx = (int32_t *)(void *)kc_out(x, (size_t)(N * k)), *row = (int32_t *)(void *)kc_out(x, (size_t)(N * k));
    int32_t *tok = (int32_t *)(void *)kc_out(x, (size_t)(N * k)), *off = (int32_t *)(void *)kc_out(x, E + 1);
    float hb[E] = {0};
    hb[E - 1] = -10.0f;
    x->k->moe_route(scores, lse, idx, gate, logits, kc_bytes(x, hb, sizeof hb), N, E, k, s->sigmoid);
    plait_bf16 *xb = kc_out_bf16(x, (size_t)(N * k * CW));
    x->k->moe_permute_bf16(row, tok, off, counts, xb, idx, inp, N, E, k, CW, cap);
    const int32_t *hoff = kc_host_copy(x, off, (E + 1) * sizeof(int32_t));
    const int64_t rows = hoff[E];
    kc_result(x, "permute row", row, (size_t)(N * k), KC_EXACT);
    kc_result(x, "permute off", off, E + 1, KC_EXACT);
    kc_result(x, "permute rows (bf16)", xb, (size_t)(rows * CW), KC_EXACT);
    /* the grouped product: c_fc-like with a bias, then into every other
     * F columns of [rows,2F] (gate|up side by side) */
    const plait_bf16 *w = kc_rand_bf16(x, E * F * CW, -0.5f, 0.5f), *b = kc_rand_bf16(x, E * F, -1, 1);
    plait_bf16 *h = kc_out_bf16(x, (size_t)(N * k * F)), *gu = kc_rand_bf16(x, (size_t)(N * k * 2 * F), -1, 1);
    x->k->moe_matmul_forward_bf16(h, F, xb, w, b, hoff, E, CW, F);
    x->k->moe_matmul_forward_bf16(gu + F, 2 * F, xb, w, NULL, hoff, E, CW, F);
    kc_result(x, "grouped product +bias", h, (size_t)(rows * F), KC_BF16);
    kc_result(x, "grouped product, rows 2F apart (the gate's columns untouched)", gu, (size_t)(rows * 2 * F), KC_BF16);
    /* the combine from bf16 rows, beside a bf16 shared output, and in place */
    const plait_bf16 *y = kc_rand_bf16(x, (size_t)(N * k * CW), -1, 1), *sh = kc_rand_bf16(x, N * CW, -1, 1);
    float *res = kc_rand(x, N * CW, -1, 1), *out = kc_out(x, N * CW);
    x->k->moe_unpermute_bf16(out, res, sh, y, row, gate, N, k, CW);
    kc_result(x, "unpermute", out, N * CW, KC_EXACT);
    x->k->moe_unpermute_bf16(res, res, NULL, y, row, gate, N, k, CW);
    kc_result(x, "unpermute in place, no shared", res, N * CW, KC_EXACT);
}

static void backward_bf16_at(kc_ctx *x, const moe_shape *s) {
    KC_NEED(x, moe_matmul_backward_bf16);
    const routed r = route(x, s);
    const int64_t k = s->k, rows = r.hoff[E];
    const float *dout = kc_rand(x, N * CW, -1, 1);
    const plait_bf16 *y = kc_rand_bf16(x, (size_t)(N * k * CW), -1, 1);
    plait_bf16 *dys = kc_out_bf16(x, (size_t)(N * k * CW));
    double *dgate = (double *)(void *)kc_out(x, (size_t)(2 * N * k));
    x->k->moe_unpermute_backward_bf16(dys, dgate, dout, y, r.row, r.gate, N, k, CW);
    kc_result(x, "unpermute backward rows (bf16)", dys, (size_t)(rows * CW), KC_EXACT);
    kc_result(x, "unpermute backward gates", dgate, (size_t)(N * k), KC_EXACT);
    float *dinp = kc_rand(x, N * CW, -1, 1);
    x->k->moe_permute_backward_bf16(dinp, y, r.row, N, k, CW);
    kc_result(x, "permute backward +=", dinp, N * CW, KC_EXACT);
    /* the grouped product's backward: c_proj-like (GELU's derivative on
     * the input gradient, the bias's gradient), then from dout's columns
     * F.. of rows 2F apart (up's, beside the gate's), the weights' alone */
    const plait_bf16 *xb = kc_rand_bf16(x, (size_t)(N * k * CW), -1, 1),
                     *pre = kc_rand_bf16(x, (size_t)(N * k * CW), -2, 2);
    const plait_bf16 *w = kc_rand_bf16(x, E * F * CW, -0.5f, 0.5f),
                     *dh = kc_rand_bf16(x, (size_t)(N * k * 2 * F), -1, 1);
    plait_bf16 *dx = kc_out_bf16(x, (size_t)(N * k * CW)), *dx2 = kc_out_bf16(x, (size_t)(N * k * CW));
    float *dw = kc_rand(x, E * F * CW, -1, 1), *db = kc_rand(x, E * F, -1, 1), *dw2 = kc_out(x, E * F * CW);
    x->k->copy(dw2, dw, E * F * CW);
    x->k->moe_matmul_backward_bf16(dx, dw, db, dh, F, xb, w, pre, r.hoff, E, CW, F);
    kc_result(x, "grouped backward dinp, GELU'", dx, (size_t)(rows * CW), KC_BF16);
    kc_result(x, "grouped backward dweight+=", dw, E * F * CW, KC_GEMM);
    kc_result(x, "grouped backward dbias+=", db, E * F, KC_ELEMWISE);
    x->k->moe_matmul_backward_bf16(dx2, dw2, NULL, dh + F, 2 * F, xb, w, NULL, r.hoff, E, CW, F);
    kc_result(x, "grouped backward dinp, rows 2F apart", dx2, (size_t)(rows * CW), KC_BF16);
    kc_result(x, "grouped backward dweight+=, rows 2F apart", dw2, E * F * CW, KC_GEMM);
}

static void case_moe_bf16_k2(kc_ctx *x) { forward_bf16_at(x, &k2); }
static void case_moe_bf16_k2_backward(kc_ctx *x) { backward_bf16_at(x, &k2); }
static void case_moe_bf16_k3_capacity(kc_ctx *x) { forward_bf16_at(x, &k3); }
static void case_moe_bf16_k3_capacity_backward(kc_ctx *x) { backward_bf16_at(x, &k3); }

const kc_named kc_moe_bf16_cases[] = {
    {"moe_bf16_k2", case_moe_bf16_k2},
    {"moe_bf16_k2_backward", case_moe_bf16_k2_backward},
    {"moe_bf16_k3_capacity", case_moe_bf16_k3_capacity},
    {"moe_bf16_k3_capacity_backward", case_moe_bf16_k3_capacity_backward},
};
const size_t kc_moe_bf16_count = sizeof kc_moe_bf16_cases / sizeof kc_moe_bf16_cases[0];

const kc_named kc_moe_cases[] = {
    {"moe_k2", case_moe_k2},
    {"moe_k2_backward", case_moe_k2_backward},
    {"moe_k1_sigmoid_capacity", case_moe_k1_sigmoid_capacity},
    {"moe_k1_sigmoid_capacity_backward", case_moe_k1_sigmoid_capacity_backward},
    {"moe_k3_capacity", case_moe_k3_capacity},
    {"moe_k3_capacity_backward", case_moe_k3_capacity_backward},
};
const size_t kc_moe_count = sizeof kc_moe_cases / sizeof kc_moe_cases[0];
