/*
 * Kernel cases of the element-wise and optimizer entries (plait/kernels.h):
 * copy, scale, axpy, zero and Σx² on a device's aligned and unaligned
 * paths, AdamW over one tensor and a list (bit for bit: every layout's
 * optimizer gives the same bits), and the exact Σx² accumulator over the
 * whole float range and over gradient-like runs, bit for bit. Outputs
 * poisoned with NaN, each case run twice on the device and required
 * bit-identical (kcase.h).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "device/kcase.h"

static void case_vector(kc_ctx *x) {
    const size_t n = 70001;
    float *a = kc_rand(x, n, -1, 1), *b = kc_rand(x, n, -1, 1), *c = kc_out(x, n);
    x->k->copy(c, a, n);
    kc_result(x, "copy", c, n, KC_EXACT);
    x->k->scale(c, n, 0.75f);
    kc_result(x, "scale", c, n, KC_EXACT);
    x->k->axpy(c, b, n, -1.5f);
    kc_result(x, "axpy", c, n, KC_ELEMWISE);
    kc_value(x, "sumsq", x->k->sumsq(c, n), KC_ELEMWISE);
    x->k->zero(c, n);
    kc_result(x, "zero", c, n, KC_EXACT);
    float *p = kc_rand(x, n, -1, 1), *g = kc_rand(x, n, -1, 1), *m = kc_rand(x, n, -0.1f, 0.1f);
    float *v = kc_rand(x, n, 0, 0.01f);
    plait_adamw_args args = {sizeof args, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 7, 0.5f};
    x->k->adamw(p, g, m, v, n, &args);
    /* exact: the CPU kernel's operations in its order, each rounded on its
     * own, so every layout's optimizer gives the same bits */
    kc_result(x, "adamw param", p, n, KC_EXACT);
    kc_result(x, "adamw m", m, n, KC_EXACT);
    kc_result(x, "adamw v", v, n, KC_EXACT);
}

/* The element-wise kernels on both of a device's paths: 16-byte aligned
 * pointers (cuda: float4 groups, then a tail of n % 4), pointers one float
 * off (one element at a time), and a span shorter than one group. */
static void case_vector_paths(kc_ctx *x) {
    static const struct {
        size_t off, n;
        const char *gelu, *dgelu, *axpy;
    } runs[3] = {{0, 40003, "gelu, aligned", "gelu backward, aligned", "scale+axpy, aligned"},
                 {1, 40002, "gelu, one float off", "gelu backward, one float off", "scale+axpy, one float off"},
                 {0, 3, "gelu, 3 elements", "gelu backward, 3 elements", "scale+axpy, 3 elements"}};
    float *a = kc_rand(x, 40004, -4, 4), *b = kc_rand(x, 40004, -1, 1);
    for (int r = 0; r < 3; r++) {
        const size_t o = runs[r].off, n = runs[r].n;
        float *y = kc_out(x, o + n), *d = kc_out(x, o + n), *c = kc_out(x, o + n);
        x->k->gelu_forward(y + o, a + o, n);
        kc_result_add(x, runs[r].gelu, y + o, n, sizeof *y, KC_ELEMWISE);
        x->k->gelu_backward(d + o, a + o, b + o, n);
        kc_result_add(x, runs[r].dgelu, d + o, n, sizeof *d, KC_ELEMWISE);
        x->k->copy(c + o, a + o, n);
        x->k->scale(c + o, n, 0.75f);
        x->k->axpy(c + o, b + o, n, -1.5f);
        kc_result_add(x, runs[r].axpy, c + o, n, sizeof *c, KC_ELEMWISE);
    }
}

/* AdamW over a list of three tensors (one of a single element, one
 * without weight decay), the clipping factor read from device memory:
 * the CPU's bits, and the bits of the per-tensor kernel given the same
 * factor on the host (one rank steps with the list, data-parallel ranks
 * with the per-tensor kernel: their parameters must agree bit for bit);
 * a NaN factor leaves every tensor as it was. */
static void case_adamw_multi(kc_ctx *x) {
    const size_t n = 70001, sizes[3] = {30000, 1, 40000};
    const float decays[3] = {0.1f, 0.0f, 0.1f};
    float *p = kc_rand(x, n, -1, 1), *g = kc_rand(x, n, -1, 1), *m = kc_rand(x, n, -0.1f, 0.1f);
    float *v = kc_rand(x, n, 0, 0.01f);
    plait_adamw_tensor t[3];
    size_t off = 0;
    for (int i = 0; i < 3; i++) {
        t[i] = (plait_adamw_tensor){p + off, g + off, m + off, v + off, sizes[i], off, decays[i], 0};
        off += sizes[i];
    }
    const plait_adamw_tensor *list = kc_bytes(x, t, sizeof t);
    const float half = 0.5f, nan = NAN;
    const float *scale = kc_bytes(x, &half, sizeof half), *no = kc_bytes(x, &nan, sizeof nan);
    plait_adamw_args args = {sizeof args, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.0f, 7, 1.0f};
    float *p1 = kc_out(x, n), *m1 = kc_out(x, n), *v1 = kc_out(x, n);
    x->k->copy(p1, p, n), x->k->copy(m1, m, n), x->k->copy(v1, v, n);
    x->k->adamw_multi(list, 3, n, &args, scale);
    kc_result(x, "param", p, n, KC_EXACT);
    kc_result(x, "m", m, n, KC_EXACT);
    kc_result(x, "v", v, n, KC_EXACT);
    off = 0;
    for (int i = 0; i < 3; i++) {
        plait_adamw_args one = args;
        one.weight_decay = decays[i], one.grad_scale = half;
        x->k->adamw(p1 + off, g + off, m1 + off, v1 + off, sizes[i], &one);
        off += sizes[i];
    }
    kc_same(x, "param = the per-tensor kernel's", p1, p, n * sizeof *p);
    kc_same(x, "m = the per-tensor kernel's", m1, m, n * sizeof *m);
    kc_same(x, "v = the per-tensor kernel's", v1, v, n * sizeof *v);
    float *before = kc_out(x, n);
    x->k->copy(before, p, n);
    x->k->adamw_multi(list, 3, n, &args, no);
    kc_same(x, "a NaN factor changes nothing", p, before, n * sizeof *p);
}

/* Values over the whole float range: normals of every exponent, denormals,
 * zeros of both signs; `special` adds an Inf and a NaN. */
static float *wide_values(kc_ctx *x, size_t n, int special) {
    float *h = malloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++) {
        uint64_t r = kc_next(x);
        uint32_t bits = (uint32_t)(r & 0x807fffffu) | (uint32_t)((r >> 32) % 255) << 23;
        if (i % 97 == 0) bits &= 0x807fffffu; /* denormal or zero */
        memcpy(&h[i], &bits, sizeof bits);
    }
    if (special) {
        h[n / 3] = INFINITY;
        h[n / 2] = NAN;
    }
    float *p = kc_bytes(x, h, n * sizeof *h);
    free(h);
    return p;
}

static void case_sumsq_exact(kc_ctx *x) {
    const size_t n = 200003;
    static const plait_sumsq_acc zero;
    float *vals = wide_values(x, n, 0), *more = wide_values(x, 1001, 1);
    plait_sumsq_acc *acc = kc_bytes(x, &zero, sizeof zero), *acc2 = kc_bytes(x, &zero, sizeof zero);
    x->k->sumsq_exact(acc, vals, n / 2);
    x->k->sumsq_exact(acc, vals + n / 2, n - n / 2);
    kc_result_add(x, "accumulator", acc, sizeof *acc, 1, KC_EXACT);
    const plait_sumsq_acc *h = kc_host_copy(x, acc, sizeof *acc);
    kc_value(x, "value", x->k->sumsq_value(h), KC_EXACT);
    x->k->sumsq_exact(acc2, more, 1001);
    x->k->sumsq_merge(acc2, acc);
    kc_result_add(x, "merged with Inf and NaN", acc2, sizeof *acc2, 1, KC_EXACT);
    kc_value(x, "value with Inf and NaN", x->k->sumsq_value(kc_host_copy(x, acc2, sizeof *acc2)), KC_EXACT);
    /* the value and the clipping factor on the device: clipping (the sum is
     * huge), no clipping (grad_clip 0), and a NaN factor for Inf */
    const double zd = 0;
    const float zf = 0;
    double *sq = kc_bytes(x, &zd, sizeof zd), *sq0 = kc_bytes(x, &zd, sizeof zd), *sq2 = kc_bytes(x, &zd, sizeof zd);
    float *sc = kc_bytes(x, &zf, sizeof zf), *sc0 = kc_bytes(x, &zf, sizeof zf), *sc2 = kc_bytes(x, &zf, sizeof zf);
    x->k->sumsq_clip(sq, sc, acc, 1.0);
    x->k->sumsq_clip(sq0, sc0, acc, 0.0);
    x->k->sumsq_clip(sq2, sc2, acc2, 1.0);
    kc_result(x, "sumsq_clip value", sq, 1, KC_EXACT);
    kc_result(x, "sumsq_clip factor", sc, 1, KC_EXACT);
    kc_result(x, "sumsq_clip factor without clipping", sc0, 1, KC_EXACT);
    kc_value(x, "sumsq_clip factor of Inf is NaN", isnan(*(const float *)kc_host_copy(x, sc2, sizeof *sc2)), KC_EXACT);
    /* one exponent, mantissas near the top: every lane of a warp in one bin,
     * and the bin's 64-bit low word carries (2^17 squares near 2^48) */
    float *hv = malloc(n * sizeof *hv);
    for (size_t i = 0; i < n; i++) {
        uint32_t bits = 0x3f7f0000u | (uint32_t)(kc_next(x) & 0xffffu) | (uint32_t)(i & 1) << 31;
        memcpy(&hv[i], &bits, sizeof bits);
    }
    float *same = kc_bytes(x, hv, n * sizeof *hv);
    free(hv);
    plait_sumsq_acc *acc3 = kc_bytes(x, &zero, sizeof zero);
    x->k->sumsq_exact(acc3, same, n);
    kc_result_add(x, "one exponent, carrying", acc3, sizeof *acc3, 1, KC_EXACT);
}

/* Gradient-like values: runs of 1 to 40,000 values around a scale that
 * changes from run to run (2^-60 to 2^20, up and down: each block's window
 * of exponents moves both ways), zero runs, and one value in 3,000 either
 * 2^40 times larger or 2^-40 times smaller than its run (outside any
 * window: added on its own), at an odd offset (no 16-byte loads). */
static void case_sumsq_runs(kc_ctx *x) {
    const size_t n = 400001;
    static const plait_sumsq_acc zero;
    float *h = malloc(n * sizeof *h);
    for (size_t i = 0; i < n;) {
        size_t len = 1 + (size_t)(kc_next(x) % 40000);
        const int zeros = kc_next(x) % 8 == 0;
        const float scale = ldexpf(1.0f, (int)(kc_next(x) % 81) - 60);
        for (; len-- && i < n; i++) {
            float v = 0.0f;
            if (!zeros) {
                for (int u = 0; u < 4; u++) v += (float)(kc_next(x) % 2001) / 1000.0f - 1.0f;
                v *= scale;
                const uint64_t r = kc_next(x) % 3000;
                if (r == 0) v = ldexpf(v, 40);
                if (r == 1) v = ldexpf(v, -40);
            }
            h[i] = v;
        }
    }
    float *vals = kc_bytes(x, h, n * sizeof *h);
    free(h);
    plait_sumsq_acc *acc = kc_bytes(x, &zero, sizeof zero), *odd = kc_bytes(x, &zero, sizeof zero);
    x->k->sumsq_exact(acc, vals, n);
    kc_result_add(x, "runs of changing scale", acc, sizeof *acc, 1, KC_EXACT);
    x->k->sumsq_exact(odd, vals + 1, n - 1);
    kc_result_add(x, "runs of changing scale, at an odd offset", odd, sizeof *odd, 1, KC_EXACT);
}

/* the element-wise kernels before the optimizer that uses them */
const kc_named kc_vector_cases[] = {
    {"vector", case_vector},         {"vector_paths", case_vector_paths}, {"sumsq_exact", case_sumsq_exact},
    {"sumsq_runs", case_sumsq_runs}, {"adamw_multi", case_adamw_multi},
};
const size_t kc_vector_count = sizeof kc_vector_cases / sizeof kc_vector_cases[0];
