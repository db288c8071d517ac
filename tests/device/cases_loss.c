/*
 * Kernel cases of the model's ends (plait/kernels.h): the token and
 * position embedding at widths of whole 16-byte groups and odd ones, on
 * uniform and text-like (Zipf) tokens, its gradients bit for bit; the
 * cross-entropy whole, split by vocabulary columns (one rank's share of a
 * tensor-parallel head, padding included) and fused in one pass, within
 * 1e-5 of the core's CPU kernels. Outputs poisoned with NaN, each case
 * run twice on the device and required bit-identical (kcase.h).
 */
#include <stdlib.h>

#include "device/kcase.h"

#define B 2
#define T 67
#define C 96
#define BT (B * T)
#define V 1000

/* The embedding's entries at width w (96: 16-byte groups; odd: one
 * column at a time). */
static void embedding_at(kc_ctx *x, int64_t w) {
    /* tokens from a narrow range repeat often: the gradient's order matters */
    int32_t *tok = kc_ints(x, BT, 280, 340, 0);
    float *wte = kc_rand(x, V * w, -1, 1), *wpe = kc_rand(x, T * w, -1, 1), *out = kc_out(x, BT * w);
    x->k->embedding_forward(out, tok, wte, wpe, B, T, w);
    kc_result(x, "forward", out, BT * w, KC_EXACT);
    float *dout = kc_rand(x, BT * w, -1, 1), *dwte = kc_rand(x, V * w, -1, 1), *dwpe = kc_rand(x, T * w, -1, 1);
    x->k->embedding_backward(dwte, dwpe, dout, tok, B, T, w);
    kc_result(x, "backward dwte+=", dwte, V * w, KC_EXACT);
    kc_result(x, "backward dwpe+=", dwpe, T * w, KC_EXACT);
    /* vocabulary-parallel: rows [300, 320) here; other tokens give zero rows */
    const int64_t start = 300, rows = 20;
    float *wl = kc_rand(x, rows * w, -1, 1), *outv = kc_out(x, BT * w), *outn = kc_out(x, BT * w);
    x->k->embedding_forward_vocab(outv, tok, wl, start, rows, wpe, B, T, w);
    x->k->embedding_forward_vocab(outn, tok, wl, start, rows, NULL, B, T, w);
    kc_result(x, "vocab forward", outv, BT * w, KC_EXACT);
    kc_result(x, "vocab forward, no positions", outn, BT * w, KC_EXACT);
    float *dwl = kc_rand(x, rows * w, -1, 1), *dwpe2 = kc_rand(x, T * w, -1, 1);
    x->k->embedding_backward_vocab(dwl, dwpe2, dout, tok, start, rows, B, T, w);
    kc_result(x, "vocab backward dwte+=", dwl, rows * w, KC_EXACT);
    kc_result(x, "vocab backward dwpe+=", dwpe2, T * w, KC_EXACT);
    float *o = kc_rand(x, BT * w, -1, 1);
    x->k->add_positions(o, wpe, B, T, w);
    kc_result(x, "add_positions", o, BT * w, KC_EXACT);
}

static void case_embedding(kc_ctx *x) { embedding_at(x, C); }
static void case_embedding_odd(kc_ctx *x) { embedding_at(x, 37); }

/* Text-like tokens: a few rows take most of them (the order of one row's
 * many additions is what matters), the rest Zipf-like over ZV rows, some
 * -1; more than one pass of the gradient kernel's tiles (4096 tokens). Two
 * hot rows 1024 apart share a block of the gradient when the table has
 * more rows than its blocks. Whole table; a slice of more rows than the
 * blocks; a slice of 10 rows around a hot one. */
#define ZB 2
#define ZT 2300
#define ZV 3000
static void embedding_zipf_at(kc_ctx *x, int64_t w) {
    const int64_t n = ZB * ZT;
    int32_t *h = malloc((size_t)n * sizeof *h);
    for (int64_t i = 0; i < n; i++) {
        const uint64_t u = kc_next(x) % 1000;
        if (u < 250) h[i] = 13;
        else if (u < 370) h[i] = 1037;
        else if (u < 450) h[i] = 11;
        else if (u < 455) h[i] = -1;
        else /* rank ~ ZV^v, v uniform: a Zipf-like tail */
            h[i] = (int32_t)(pow((double)ZV, (double)(kc_next(x) % 100000) / 100000.0) - 1.0);
    }
    int32_t *tok = kc_bytes(x, h, (size_t)n * sizeof *h);
    free(h);
    float *dout = kc_rand(x, (size_t)(n * w), -1, 1);
    float *dwte = kc_rand(x, (size_t)(ZV * w), -1, 1), *dwpe = kc_rand(x, (size_t)(ZT * w), -1, 1);
    x->k->embedding_backward(dwte, dwpe, dout, tok, ZB, ZT, w);
    kc_result(x, "backward dwte+=", dwte, (size_t)(ZV * w), KC_EXACT);
    kc_result(x, "backward dwpe+=", dwpe, (size_t)(ZT * w), KC_EXACT);
    static const int64_t slice[2][2] = {{2, 1100}, {1032, 10}};
    static const char *const name[2] = {"vocab [2, 1102) backward dwte+=", "vocab [1032, 1042) backward dwte+="};
    for (int s = 0; s < 2; s++) {
        float *dwl = kc_rand(x, (size_t)(slice[s][1] * w), -1, 1);
        x->k->embedding_backward_vocab(dwl, NULL, dout, tok, slice[s][0], slice[s][1], ZB, ZT, w);
        kc_result(x, name[s], dwl, (size_t)(slice[s][1] * w), KC_EXACT);
    }
}

static void case_embedding_zipf(kc_ctx *x) { embedding_zipf_at(x, C); }
static void case_embedding_zipf_odd(kc_ctx *x) { embedding_zipf_at(x, 37); }

static void case_crossentropy(kc_ctx *x) {
    int32_t *tg = kc_ints(x, BT, 0, V, 7); /* every 7th row without a target */
    float *logits = kc_rand(x, BT * V, -4, 4), *losses = kc_out(x, BT), *dl = kc_out(x, BT * V);
    x->k->crossentropy(losses, dl, logits, tg, BT, V, 1.0f / BT);
    kc_result(x, "losses", losses, BT, KC_ELEMWISE);
    kc_result(x, "dlogits", dl, BT * V, KC_ELEMWISE);
    float *ev = kc_out(x, BT);
    x->k->crossentropy(ev, NULL, logits, tg, BT, V, 1.0f);
    kc_result(x, "losses, evaluation", ev, BT, KC_ELEMWISE);
    float *inpl = kc_rand(x, BT * V, -4, 4), *l2 = kc_out(x, BT);
    x->k->crossentropy(l2, inpl, inpl, tg, BT, V, 0.5f); /* dlogits == logits */
    kc_result(x, "dlogits in place", inpl, BT * V, KC_ELEMWISE);
    kc_result(x, "losses (in place run)", l2, BT, KC_ELEMWISE);
}

static void case_vocab_loss(kc_ctx *x) {
    /* this rank: columns [600, 900), the last 10 of them padding */
    const int64_t start = 600, Vl = 300, valid = 290;
    int32_t *tg = kc_ints(x, BT, 0, V, 5);
    float *logits = kc_rand(x, BT * Vl, -4, 4);
    float *mx = kc_out(x, BT), *se = kc_out(x, BT), *tl = kc_out(x, BT);
    x->k->logits_rowmax(mx, logits, BT, Vl, valid);
    x->k->logits_sumexp(se, logits, mx, BT, Vl, valid);
    x->k->logits_target(tl, logits, tg, start, BT, Vl, valid);
    kc_result(x, "rowmax", mx, BT, KC_EXACT);
    kc_result(x, "sumexp", se, BT, KC_ELEMWISE);
    kc_result(x, "target logit", tl, BT, KC_EXACT);
    const double half = 0.5;
    double *sum = kc_bytes(x, &half, sizeof half);
    float *lse = kc_out(x, BT), *losses = kc_out(x, BT);
    x->k->loss_rows(losses, lse, mx, se, tl, tg, BT, sum);
    kc_result(x, "loss_rows lse", lse, BT, KC_ELEMWISE);
    kc_result(x, "loss_rows losses", losses, BT, KC_ELEMWISE);
    kc_result(x, "loss_rows sum+=", sum, 1, KC_ELEMWISE);
    /* in place: lse over rowmax, losses over tlogit */
    x->k->loss_rows(tl, mx, mx, se, tl, tg, BT, sum);
    kc_result(x, "loss_rows in place", tl, BT, KC_ELEMWISE);
    float *dl = kc_out(x, BT * Vl);
    x->k->crossentropy_backward(dl, logits, lse, tg, start, BT, Vl, valid, 1.0f / BT);
    kc_result(x, "backward", dl, BT * Vl, KC_ELEMWISE);
    x->k->crossentropy_backward(logits, logits, lse, tg, start, BT, Vl, valid, 2.0f);
    kc_result(x, "backward in place", logits, BT * Vl, KC_ELEMWISE);
    double *z = kc_bytes(x, &half, sizeof half);
    x->k->zero_f64(z, 1);
    kc_result(x, "zero_f64", z, 1, KC_EXACT);
}

/* The head's whole loss in one pass (every class on this rank, 10 padding
 * columns, every 5th row without a target): against the CPU's, which is
 * the pieces' arithmetic; the gradient in place and beside, and the loss
 * alone. */
static void case_fused_loss(kc_ctx *x) {
    const int has = PLAIT_KERNELS_HAS_FUSED_LOSS(x->k);
    kc_value(x, "the table has crossentropy_fused", has, KC_EXACT);
    if (!has) return;
    const int64_t Vl = 300, valid = 290;
    int32_t *tg = kc_ints(x, BT, 0, (int32_t)valid, 5);
    float *logits = kc_rand(x, BT * Vl, -4, 4), *losses = kc_out(x, BT), *lse = kc_out(x, BT);
    float *dl = kc_out(x, BT * Vl);
    const double half = 0.5;
    double *sum = kc_bytes(x, &half, sizeof half), *sum2 = kc_bytes(x, &half, sizeof half);
    x->k->crossentropy_fused(losses, lse, sum, dl, logits, tg, BT, Vl, valid, 1.0f / BT);
    kc_result(x, "losses", losses, BT, KC_ELEMWISE);
    kc_result(x, "lse", lse, BT, KC_ELEMWISE);
    kc_result(x, "loss sum+=", sum, 1, KC_ELEMWISE);
    kc_result(x, "dlogits", dl, BT * Vl, KC_ELEMWISE);
    float *l2 = kc_out(x, BT);
    x->k->crossentropy_fused(l2, NULL, sum2, NULL, logits, tg, BT, Vl, valid, 1.0f / BT);
    kc_same(x, "the loss without the gradient: the same losses", l2, losses, BT * sizeof *l2);
    x->k->crossentropy_fused(l2, NULL, sum2, logits, logits, tg, BT, Vl, valid, 1.0f / BT);
    kc_same(x, "the gradient in place: the same values", logits, dl, (size_t)(BT * Vl) * sizeof *dl);
    /* rows whose width is not a multiple of 4 (a device's one-column path) */
    const int64_t Vn = Vl + 2;
    float *ln = kc_rand(x, BT * Vn, -4, 4), *dn = kc_out(x, BT * Vn), *lossn = kc_out(x, BT);
    x->k->crossentropy_fused(lossn, NULL, sum2, dn, ln, tg, BT, Vn, valid, 1.0f / BT);
    kc_result(x, "losses, odd width", lossn, BT, KC_ELEMWISE);
    kc_result(x, "dlogits, odd width", dn, BT * Vn, KC_ELEMWISE);
}

/* the embedding first, the loss after, as a step runs them */
const kc_named kc_loss_cases[] = {
    {"embedding", case_embedding},           {"embedding_odd", case_embedding_odd},
    {"embedding_zipf", case_embedding_zipf}, {"embedding_zipf_odd", case_embedding_zipf_odd},
    {"crossentropy", case_crossentropy},     {"vocab_loss", case_vocab_loss},
    {"fused_loss", case_fused_loss},
};
const size_t kc_loss_count = sizeof kc_loss_cases / sizeof kc_loss_cases[0];
