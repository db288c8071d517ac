/*
 * The sim test device's kernel table (sim_device.h): every entry queued on
 * the compute stream with its arguments and run late by plait's CPU
 * kernels on the translated addresses, so results are the cpu device's,
 * bit for bit; an entry that returns a value waits for the queue first.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sim_device.h"

/* ---- the kernels: queued; run with addresses translated by the CPU kernels -- */

static void r_sgemm(const sim_op *o) {
    plait_k_sgemm(o->a[0].i, o->a[1].i, o->a[2].i, o->a[3].i, o->a[4].i, o->a[5].f, HC(o->a[6].p), o->a[7].i,
        HC(o->a[8].p), o->a[9].i, o->a[10].f, HF(o->a[11].p), o->a[12].i);
}
static void k_sgemm(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                    const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    Q(r_sgemm, I(ta), I(tb), I(M), I(N), I(K), F(alpha), P(A), I(lda), P(B), I(ldb), F(beta), P(C), I(ldc));
}
static void r_zero(const sim_op *o) {
    plait_k_zero(HF(o->a[0].p), o->a[1].i);
}
static void k_zero(float *x, size_t n) {
    Q(r_zero, P(x), I(n));
}
static void r_copy(const sim_op *o) {
    plait_k_copy(HF(o->a[0].p), HC(o->a[1].p), o->a[2].i);
}
static void k_copy(float *dst, const float *src, size_t n) {
    Q(r_copy, P(dst), P(src), I(n));
}
static void r_scale(const sim_op *o) {
    plait_k_scale(HF(o->a[0].p), o->a[1].i, o->a[2].f);
}
static void k_scale(float *x, size_t n, float a) {
    Q(r_scale, P(x), I(n), F(a));
}
static void r_axpy(const sim_op *o) {
    plait_k_axpy(HF(o->a[0].p), HC(o->a[1].p), o->a[2].i, o->a[3].f);
}
static void k_axpy(float *y, const float *x, size_t n, float a) {
    Q(r_axpy, P(y), P(x), I(n), F(a));
}
static void r_sumsq_exact(const sim_op *o) {
    plait_k_sumsq_exact(H(o->a[0].p), HC(o->a[1].p), o->a[2].i);
}
static void k_sumsq_exact(plait_sumsq_acc *acc, const float *x, size_t n) {
    Q(r_sumsq_exact, P(acc), P(x), I(n));
}
static void r_sumsq_merge(const sim_op *o) {
    plait_k_sumsq_merge(H(o->a[0].p), H(o->a[1].p));
}
static void k_sumsq_merge(plait_sumsq_acc *dst, const plait_sumsq_acc *src) {
    Q(r_sumsq_merge, P(dst), P(src));
}
static void r_matmul_forward(const sim_op *o) {
    plait_k_matmul_forward(HF(o->a[0].p), HC(o->a[1].p), HC(o->a[2].p), HC(o->a[3].p), o->a[4].i, o->a[5].i, o->a[6].i);
}
static void k_matmul_forward(float *out, const float *inp, const float *w, const float *b, int64_t BT, int64_t C,
                             int64_t OC) {
    Q(r_matmul_forward, P(out), P(inp), P(w), P(b), I(BT), I(C), I(OC));
}
static void r_matmul_backward(const sim_op *o) {
    plait_k_matmul_backward(HF(o->a[0].p), HF(o->a[1].p), HF(o->a[2].p), HC(o->a[3].p), HC(o->a[4].p), HC(o->a[5].p),
        o->a[6].i, o->a[7].i, o->a[8].i);
}
static void k_matmul_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                              int64_t BT, int64_t C, int64_t OC) {
    Q(r_matmul_backward, P(dinp), P(dw), P(db), P(dout), P(inp), P(w), I(BT), I(C), I(OC));
}
static void r_layernorm_forward(const sim_op *o) {
    plait_k_layernorm_forward(HF(o->a[0].p), HF(o->a[1].p), HF(o->a[2].p), HC(o->a[3].p), HC(o->a[4].p),
        HC(o->a[5].p), o->a[6].i, o->a[7].i);
}
static void k_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                                const float *b, int64_t BT, int64_t C) {
    Q(r_layernorm_forward, P(out), P(mean), P(rstd), P(inp), P(w), P(b), I(BT), I(C));
}
static void r_layernorm_backward(const sim_op *o) {
    plait_k_layernorm_backward(HF(o->a[0].p), HF(o->a[1].p), HF(o->a[2].p), HC(o->a[3].p), HC(o->a[4].p),
        HC(o->a[5].p), HC(o->a[6].p), HC(o->a[7].p), o->a[8].i, o->a[9].i);
}
static void k_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                                 const float *w, const float *mean, const float *rstd, int64_t BT, int64_t C) {
    Q(r_layernorm_backward, P(dinp), P(dw), P(db), P(dout), P(inp), P(w), P(mean), P(rstd), I(BT), I(C));
}
static void r_gelu_forward(const sim_op *o) {
    plait_k_gelu_forward(HF(o->a[0].p), HC(o->a[1].p), o->a[2].i);
}
static void k_gelu_forward(float *out, const float *inp, size_t n) {
    Q(r_gelu_forward, P(out), P(inp), I(n));
}
static void r_gelu_backward(const sim_op *o) {
    plait_k_gelu_backward(HF(o->a[0].p), HC(o->a[1].p), HC(o->a[2].p), o->a[3].i);
}
static void k_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    Q(r_gelu_backward, P(dinp), P(inp), P(dout), I(n));
}
static void r_attention_forward(const sim_op *o) {
    plait_k_attention_forward(HF(o->a[0].p), HF(o->a[1].p), HC(o->a[2].p), o->a[3].i, o->a[4].i, o->a[5].i, o->a[6].i);
}
static void k_attention_forward(float *out, float *att, const float *qkv, int64_t B, int64_t T, int64_t NH,
                                int64_t HS) {
    Q(r_attention_forward, P(out), P(att), P(qkv), I(B), I(T), I(NH), I(HS));
}
static void r_attention_fused_forward(const sim_op *o) {
    plait_k_attention_fused_forward(HF(o->a[0].p), HF(o->a[1].p), HF(o->a[2].p), HC(o->a[3].p), o->a[4].i, o->a[5].i,
                                    o->a[6].i, o->a[7].i);
}
static void k_attention_fused_forward(float *out, float *lse, float *scratch, const float *qkv, int64_t B, int64_t T,
                                      int64_t NH, int64_t HS) {
    Q(r_attention_fused_forward, P(out), P(lse), P(scratch), P(qkv), I(B), I(T), I(NH), I(HS));
}
static void r_attention_fused_backward(const sim_op *o) {
    plait_k_attention_fused_backward(HF(o->a[0].p), HF(o->a[1].p), HC(o->a[2].p), HC(o->a[3].p), HC(o->a[4].p),
                                     HC(o->a[5].p), o->a[6].i, o->a[7].i, o->a[8].i, o->a[9].i);
}
static void k_attention_fused_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                                       const float *out, const float *lse, int64_t B, int64_t T, int64_t NH,
                                       int64_t HS) {
    Q(r_attention_fused_backward, P(dqkv), P(scratch), P(dout), P(qkv), P(out), P(lse), I(B), I(T), I(NH), I(HS));
}
static void r_attention_backward(const sim_op *o) {
    plait_k_attention_backward(HF(o->a[0].p), HF(o->a[1].p), HC(o->a[2].p), HC(o->a[3].p), HC(o->a[4].p), o->a[5].i,
        o->a[6].i, o->a[7].i, o->a[8].i);
}
static void k_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *att,
                                 int64_t B, int64_t T, int64_t NH, int64_t HS) {
    Q(r_attention_backward, P(dqkv), P(scratch), P(dout), P(qkv), P(att), I(B), I(T), I(NH), I(HS));
}
static void r_embedding_forward(const sim_op *o) {
    plait_k_embedding_forward(HF(o->a[0].p), HI(o->a[1].p), HC(o->a[2].p), HC(o->a[3].p), o->a[4].i, o->a[5].i,
        o->a[6].i);
}
static void k_embedding_forward(float *out, const int32_t *tok, const float *wte, const float *wpe, int64_t B,
                                int64_t T, int64_t C) {
    Q(r_embedding_forward, P(out), P(tok), P(wte), P(wpe), I(B), I(T), I(C));
}
static void r_embedding_backward(const sim_op *o) {
    plait_k_embedding_backward(HF(o->a[0].p), HF(o->a[1].p), HC(o->a[2].p), HI(o->a[3].p), o->a[4].i, o->a[5].i,
        o->a[6].i);
}
static void k_embedding_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tok, int64_t B,
                                 int64_t T, int64_t C) {
    Q(r_embedding_backward, P(dwte), P(dwpe), P(dout), P(tok), I(B), I(T), I(C));
}
static void r_crossentropy(const sim_op *o) {
    plait_k_crossentropy(HF(o->a[0].p), HF(o->a[1].p), HC(o->a[2].p), HI(o->a[3].p), o->a[4].i, o->a[5].i, o->a[6].f);
}
static void k_crossentropy(float *losses, float *dlogits, const float *logits, const int32_t *targets, int64_t BT,
                           int64_t V, float scale) {
    Q(r_crossentropy, P(losses), P(dlogits), P(logits), P(targets), I(BT), I(V), F(scale));
}
static void r_matmul_forward_residual(const sim_op *o) {
    plait_k_matmul_forward_residual(HF(o->a[0].p), HC(o->a[1].p), HC(o->a[2].p), HC(o->a[3].p), HC(o->a[4].p),
        o->a[5].i, o->a[6].i, o->a[7].i);
}
static void k_matmul_forward_residual(float *out, const float *res, const float *inp, const float *w, const float *b,
                                      int64_t BT, int64_t C, int64_t OC) {
    Q(r_matmul_forward_residual, P(out), P(res), P(inp), P(w), P(b), I(BT), I(C), I(OC));
}
static void r_add_bias_residual(const sim_op *o) {
    plait_k_add_bias_residual(HF(o->a[0].p), HC(o->a[1].p), HC(o->a[2].p), o->a[3].i, o->a[4].i);
}
static void k_add_bias_residual(float *x, const float *res, const float *b, int64_t BT, int64_t C) {
    Q(r_add_bias_residual, P(x), P(res), P(b), I(BT), I(C));
}
static void r_bias_backward(const sim_op *o) {
    plait_k_bias_backward(HF(o->a[0].p), HC(o->a[1].p), o->a[2].i, o->a[3].i);
}
static void k_bias_backward(float *db, const float *dout, int64_t BT, int64_t OC) {
    Q(r_bias_backward, P(db), P(dout), I(BT), I(OC));
}
static void r_attention_probs(const sim_op *o) {
    plait_k_attention_probs(HF(o->a[0].p), HC(o->a[1].p), o->a[2].i, o->a[3].i, o->a[4].i, o->a[5].i);
}
static void k_attention_probs(float *att, const float *qkv, int64_t B, int64_t T, int64_t NH, int64_t HS) {
    Q(r_attention_probs, P(att), P(qkv), I(B), I(T), I(NH), I(HS));
}
static void r_embedding_forward_vocab(const sim_op *o) {
    plait_k_embedding_forward_vocab(HF(o->a[0].p), HI(o->a[1].p), HC(o->a[2].p), o->a[3].i, o->a[4].i, HC(o->a[5].p),
        o->a[6].i, o->a[7].i, o->a[8].i);
}
static void k_embedding_forward_vocab(float *out, const int32_t *tok, const float *wte, int64_t vs, int64_t nr,
                                      const float *wpe, int64_t B, int64_t T, int64_t C) {
    Q(r_embedding_forward_vocab, P(out), P(tok), P(wte), I(vs), I(nr), P(wpe), I(B), I(T), I(C));
}
static void r_embedding_backward_vocab(const sim_op *o) {
    plait_k_embedding_backward_vocab(HF(o->a[0].p), HF(o->a[1].p), HC(o->a[2].p), HI(o->a[3].p), o->a[4].i, o->a[5].i,
        o->a[6].i, o->a[7].i, o->a[8].i);
}
static void k_embedding_backward_vocab(float *dwte, float *dwpe, const float *dout, const int32_t *tok, int64_t vs,
                                       int64_t nr, int64_t B, int64_t T, int64_t C) {
    Q(r_embedding_backward_vocab, P(dwte), P(dwpe), P(dout), P(tok), I(vs), I(nr), I(B), I(T), I(C));
}
static void r_add_positions(const sim_op *o) {
    plait_k_add_positions(HF(o->a[0].p), HC(o->a[1].p), o->a[2].i, o->a[3].i, o->a[4].i);
}
static void k_add_positions(float *out, const float *wpe, int64_t B, int64_t T, int64_t C) {
    Q(r_add_positions, P(out), P(wpe), I(B), I(T), I(C));
}
static void r_logits_rowmax(const sim_op *o) {
    plait_k_logits_rowmax(HF(o->a[0].p), HC(o->a[1].p), o->a[2].i, o->a[3].i, o->a[4].i);
}
static void k_logits_rowmax(float *rowmax, const float *logits, int64_t BT, int64_t Vl, int64_t nv) {
    Q(r_logits_rowmax, P(rowmax), P(logits), I(BT), I(Vl), I(nv));
}
static void r_logits_sumexp(const sim_op *o) {
    plait_k_logits_sumexp(HF(o->a[0].p), HC(o->a[1].p), HC(o->a[2].p), o->a[3].i, o->a[4].i, o->a[5].i);
}
static void k_logits_sumexp(float *sumexp, const float *logits, const float *rowmax, int64_t BT, int64_t Vl,
                            int64_t nv) {
    Q(r_logits_sumexp, P(sumexp), P(logits), P(rowmax), I(BT), I(Vl), I(nv));
}
static void r_logits_target(const sim_op *o) {
    plait_k_logits_target(HF(o->a[0].p), HC(o->a[1].p), HI(o->a[2].p), o->a[3].i, o->a[4].i, o->a[5].i, o->a[6].i);
}
static void k_logits_target(float *tlogit, const float *logits, const int32_t *targets, int64_t vs, int64_t BT,
                            int64_t Vl, int64_t nv) {
    Q(r_logits_target, P(tlogit), P(logits), P(targets), I(vs), I(BT), I(Vl), I(nv));
}
static void r_loss_rows(const sim_op *o) {
    plait_k_loss_rows(HF(o->a[0].p), HF(o->a[1].p), HC(o->a[2].p), HC(o->a[3].p), HC(o->a[4].p), HI(o->a[5].p),
        o->a[6].i, H(o->a[7].p));
}
static void k_loss_rows(float *losses, float *lse, const float *rowmax, const float *sumexp, const float *tlogit,
                        const int32_t *targets, int64_t BT, double *loss_sum) {
    Q(r_loss_rows, P(losses), P(lse), P(rowmax), P(sumexp), P(tlogit), P(targets), I(BT), P(loss_sum));
}
static void r_crossentropy_backward(const sim_op *o) {
    plait_k_crossentropy_backward(HF(o->a[0].p), HC(o->a[1].p), HC(o->a[2].p), HI(o->a[3].p), o->a[4].i, o->a[5].i,
        o->a[6].i, o->a[7].i, o->a[8].f);
}
static void k_crossentropy_backward(float *dlogits, const float *logits, const float *lse, const int32_t *targets,
                                    int64_t vs, int64_t BT, int64_t Vl, int64_t nv, float scale) {
    Q(r_crossentropy_backward, P(dlogits), P(logits), P(lse), P(targets), I(vs), I(BT), I(Vl), I(nv), F(scale));
}
static void r_zero_f64(const sim_op *o) {
    plait_k_zero_f64(H(o->a[0].p), o->a[1].i);
}
static void k_zero_f64(double *dst, size_t n) {
    Q(r_zero_f64, P(dst), I(n));
}

/* Returns a value to the host: waits for the queue, then runs here. */
static double k_sumsq(const float *x, size_t n) {
    sim_host_sync();
    return plait_k_sumsq(HC(x), n);
}
/* The arguments are host memory of the caller's: taken at the call. */
static void r_adamw(const sim_op *o) {
    plait_k_adamw(HF(o->a[0].p), HC(o->a[1].p), HF(o->a[2].p), HF(o->a[3].p), (size_t)o->a[4].i, o->extra);
}
static void k_adamw(float *p, const float *g, float *m, float *v, size_t n, const plait_adamw_args *a) {
    plait_adamw_args *taken = malloc(sizeof *taken);
    if (!taken) { /* no room to queue it: run it in order now */
        sim_run_all();
        plait_k_adamw(HF(p), HC(g), HF(m), HF(v), n, a);
        return;
    }
    memcpy(taken, a, sizeof *taken);
    sim_enqueue(&(sim_op){.run = r_adamw, .a = {P(p), P(g), P(m), P(v), I(n)}, .extra = taken});
}

static void r_sumsq_clip(const sim_op *o) {
    plait_k_sumsq_clip((double *)H(o->a[0].p), HF(o->a[1].p), (const plait_sumsq_acc *)H(o->a[2].p), o->a[3].d);
}
static void k_sumsq_clip(double *sumsq, float *scale, const plait_sumsq_acc *acc, double grad_clip) {
    Q(r_sumsq_clip, P(sumsq), P(scale), P(acc), D(grad_clip));
}
/* The list lives in device memory and holds device addresses: translated
 * when the operation runs. */
static void r_adamw_multi(const sim_op *o) {
    const plait_adamw_tensor *dev = (const plait_adamw_tensor *)H(o->a[0].p);
    size_t count = (size_t)o->a[1].i;
    plait_adamw_tensor *t = malloc((count ? count : 1) * sizeof *t);
    if (!t) abort(); /* a test device: no room to translate the list */
    for (size_t i = 0; i < count; i++) {
        t[i] = dev[i];
        t[i].param = HF(dev[i].param);
        t[i].grad = HC(dev[i].grad);
        t[i].m = HF(dev[i].m);
        t[i].v = HF(dev[i].v);
    }
    plait_k_adamw_multi(t, count, (size_t)o->a[2].i, o->extra, HC(o->a[3].p));
    free(t);
}
static void k_adamw_multi(const plait_adamw_tensor *tensors, size_t count, size_t total, const plait_adamw_args *a,
                          const float *scale) {
    sim_op op = {.run = r_adamw_multi, .a = {P(tensors), I(count), I(total), P(scale)}};
    plait_adamw_args *taken = malloc(sizeof *taken);
    if (!taken) { /* no room to queue it: run it in order now */
        sim_run_all();
        op.extra = (void *)a;
        r_adamw_multi(&op);
        return;
    }
    memcpy(taken, a, sizeof *taken);
    op.extra = taken;
    sim_enqueue(&op);
}

static void r_crossentropy_fused(const sim_op *o) {
    plait_k_crossentropy_fused(HF(o->a[0].p), HF(o->a[1].p), (double *)H(o->a[2].p), HF(o->a[3].p), HC(o->a[4].p),
                               HI(o->a[5].p), o->a[6].i, o->a[7].i, o->a[8].i, o->a[9].f);
}
static void k_crossentropy_fused(float *losses, float *lse, double *loss_sum, float *dlogits, const float *logits,
                                 const int32_t *targets, int64_t BT, int64_t Vl, int64_t n_valid, float scale) {
    Q(r_crossentropy_fused, P(losses), P(lse), P(loss_sum), P(dlogits), P(logits), P(targets), I(BT), I(Vl),
      I(n_valid), F(scale));
}

static void r_layernorm_backward_fused(const sim_op *o) {
    plait_k_layernorm_backward_fused(HF(o->a[0].p), HC(o->a[1].p), HF(o->a[2].p), HF(o->a[3].p), HC(o->a[4].p),
                                     HC(o->a[5].p), HC(o->a[6].p), HC(o->a[7].p), HC(o->a[8].p), o->a[9].i,
                                     o->a[10].i);
}
static void k_layernorm_backward_fused(float *dinp, const float *dres, float *dw, float *db, const float *dout,
                                       const float *inp, const float *w, const float *mean, const float *rstd,
                                       int64_t BT, int64_t C) {
    Q(r_layernorm_backward_fused, P(dinp), P(dres), P(dw), P(db), P(dout), P(inp), P(w), P(mean), P(rstd), I(BT),
      I(C));
}

static void r_matmul_forward_gelu(const sim_op *o) {
    plait_k_matmul_forward_gelu(HF(o->a[0].p), HF(o->a[1].p), HC(o->a[2].p), HC(o->a[3].p), HC(o->a[4].p),
                                o->a[5].i, o->a[6].i, o->a[7].i);
}
static void k_matmul_forward_gelu(float *out, float *pre, const float *inp, const float *w, const float *bias,
                                  int64_t BT, int64_t C, int64_t OC) {
    Q(r_matmul_forward_gelu, P(out), P(pre), P(inp), P(w), P(bias), I(BT), I(C), I(OC));
}
static void r_matmul_backward_gelu(const sim_op *o) {
    plait_k_matmul_backward_gelu(HF(o->a[0].p), HF(o->a[1].p), HF(o->a[2].p), HC(o->a[3].p), HC(o->a[4].p),
                                 HC(o->a[5].p), HC(o->a[6].p), o->a[7].i, o->a[8].i, o->a[9].i);
}
static void k_matmul_backward_gelu(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                                   const float *w, const float *pre, int64_t BT, int64_t C, int64_t OC) {
    Q(r_matmul_backward_gelu, P(dinp), P(dw), P(db), P(dout), P(inp), P(w), P(pre), I(BT), I(C), I(OC));
}

/* the Llama family's (ABI 1.10) */
static void r_attention_gqa_forward(const sim_op *o) {
    plait_k_attention_gqa_forward(HF(o->a[0].p), HF(o->a[1].p), HF(o->a[2].p), HC(o->a[3].p), o->a[4].i, o->a[5].i,
                                  o->a[6].i, o->a[7].i, o->a[8].i);
}
static void k_attention_gqa_forward(float *out, float *lse, float *scratch, const float *qkv, int64_t B, int64_t T,
                                    int64_t NH, int64_t NKV, int64_t HS) {
    Q(r_attention_gqa_forward, P(out), P(lse), P(scratch), P(qkv), I(B), I(T), I(NH), I(NKV), I(HS));
}
static void r_attention_gqa_backward(const sim_op *o) {
    plait_k_attention_gqa_backward(HF(o->a[0].p), HF(o->a[1].p), HC(o->a[2].p), HC(o->a[3].p), HC(o->a[4].p),
                                   HC(o->a[5].p), o->a[6].i, o->a[7].i, o->a[8].i, o->a[9].i, o->a[10].i);
}
static void k_attention_gqa_backward(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *out,
                                     const float *lse, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS) {
    Q(r_attention_gqa_backward, P(dqkv), P(scratch), P(dout), P(qkv), P(out), P(lse), I(B), I(T), I(NH), I(NKV), I(HS));
}
static void r_rmsnorm_forward(const sim_op *o) {
    plait_k_rmsnorm_forward(HF(o->a[0].p), HF(o->a[1].p), HC(o->a[2].p), HC(o->a[3].p), o->a[4].i, o->a[5].i,
                            o->a[6].f);
}
static void k_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int64_t BT, int64_t C,
                              float eps) {
    Q(r_rmsnorm_forward, P(out), P(rstd), P(inp), P(w), I(BT), I(C), F(eps));
}
static void r_rmsnorm_backward(const sim_op *o) {
    plait_k_rmsnorm_backward(HF(o->a[0].p), HC(o->a[1].p), HF(o->a[2].p), HC(o->a[3].p), HC(o->a[4].p), HC(o->a[5].p),
                             HC(o->a[6].p), o->a[7].i, o->a[8].i);
}
static void k_rmsnorm_backward(float *dinp, const float *dres, float *dw, const float *dout, const float *inp,
                               const float *w, const float *rstd, int64_t BT, int64_t C) {
    Q(r_rmsnorm_backward, P(dinp), P(dres), P(dw), P(dout), P(inp), P(w), P(rstd), I(BT), I(C));
}
static void r_rope(const sim_op *o) {
    plait_k_rope(HF(o->a[0].p), HC(o->a[1].p), o->a[2].i, o->a[3].i, o->a[4].i, o->a[5].i, o->a[6].i, (int)o->a[7].i);
}
static void k_rope(float *x, const float *cs, int64_t B, int64_t T, int64_t row_stride, int64_t n_heads, int64_t HS,
                   int inverse) {
    Q(r_rope, P(x), P(cs), I(B), I(T), I(row_stride), I(n_heads), I(HS), I(inverse));
}
static void r_swiglu_forward(const sim_op *o) {
    plait_k_swiglu_forward(HF(o->a[0].p), HC(o->a[1].p), HC(o->a[2].p), (size_t)o->a[3].i);
}
static void k_swiglu_forward(float *out, const float *gate, const float *up, size_t n) {
    Q(r_swiglu_forward, P(out), P(gate), P(up), I(n));
}
static void r_swiglu_backward(const sim_op *o) {
    plait_k_swiglu_backward(HF(o->a[0].p), HF(o->a[1].p), HC(o->a[2].p), HC(o->a[3].p), HC(o->a[4].p),
                            (size_t)o->a[5].i);
}
static void k_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                              size_t n) {
    Q(r_swiglu_backward, P(dgate), P(dup), P(dout), P(gate), P(up), I(n));
}

/* bf16 messages (ABI 1.23: to_bf16 and from_bf16 alone, not the
 * bf16-activation products, so the model keeps float32 activations here):
 * what a bf16 run's tensor-parallel collectives and pipeline transfers
 * travel as through NCCL's stand-in. Round to nearest even, NaN kept. */
static void r_to_bf16(const sim_op *o) {
    uint16_t *dst = H(o->a[0].p);
    const float *src = HC(o->a[1].p);
    for (size_t i = 0; i < (size_t)o->a[2].i; i++) {
        uint32_t b;
        memcpy(&b, &src[i], sizeof b);
        if ((b & 0x7fffffffu) > 0x7f800000u) dst[i] = (uint16_t)((b >> 16) | 0x40u);
        else dst[i] = (uint16_t)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
    }
}
static void k_to_bf16(plait_bf16 *dst, const float *src, size_t n) { Q(r_to_bf16, P(dst), P(src), I(n)); }
static void r_from_bf16(const sim_op *o) {
    float *dst = HF(o->a[0].p);
    const uint16_t *src = H(o->a[1].p);
    for (size_t i = 0; i < (size_t)o->a[2].i; i++) {
        uint32_t b = (uint32_t)src[i] << 16;
        memcpy(&dst[i], &b, sizeof b);
    }
}
static void k_from_bf16(float *dst, const plait_bf16 *src, size_t n) { Q(r_from_bf16, P(dst), P(src), I(n)); }
/* Ring attention's block kernels: the block's description is host memory
 * of the caller's, taken at the call. A test device: no room to take it
 * ends the process. */
static plait_ring_block *take_block(const plait_ring_block *blk) {
    plait_ring_block *taken = malloc(sizeof *taken);
    if (!taken) abort();
    *taken = *blk;
    return taken;
}
static void r_ring_attention_forward(const sim_op *o) {
    plait_k_ring_attention_forward(HF(o->a[0].p), HF(o->a[1].p), HF(o->a[2].p), HC(o->a[3].p), HC(o->a[4].p), o->a[5].i,
                                   o->a[6].i, o->a[7].i, o->a[8].i, o->a[9].i, o->a[10].i, o->extra);
}
static void k_ring_attention_forward(float *out, float *mx, float *l, const float *qkv, const float *kv,
                                     int64_t kv_stride, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                                     const plait_ring_block *blk) {
    sim_enqueue(&(sim_op){.run = r_ring_attention_forward,
                          .a = {P(out), P(mx), P(l), P(qkv), P(kv), I(kv_stride), I(B), I(T), I(NH), I(NKV), I(HS)},
                          .extra = take_block(blk)});
}
static void r_ring_attention_finish(const sim_op *o) {
    plait_k_ring_attention_finish(HF(o->a[0].p), HF(o->a[1].p), HC(o->a[2].p), o->a[3].i, o->a[4].i, o->a[5].i,
                                  o->a[6].i);
}
static void k_ring_attention_finish(float *out, float *mx, const float *l, int64_t B, int64_t T, int64_t NH,
                                    int64_t HS) {
    Q(r_ring_attention_finish, P(out), P(mx), P(l), I(B), I(T), I(NH), I(HS));
}
static void r_ring_attention_backward(const sim_op *o) {
    plait_k_ring_attention_backward(HF(o->a[0].p), HF(o->a[1].p), HC(o->a[2].p), HC(o->a[3].p), o->a[4].i,
                                    HC(o->a[5].p), HC(o->a[6].p), HC(o->a[7].p), o->a[8].i, o->a[9].i, o->a[10].i,
                                    o->a[11].i, o->a[12].i, o->extra);
}
static void k_ring_attention_backward(float *dqkv, float *dkv, const float *qkv, const float *kv, int64_t kv_stride,
                                      const float *dout, const float *out, const float *lse, int64_t B, int64_t T,
                                      int64_t NH, int64_t NKV, int64_t HS, const plait_ring_block *blk) {
    sim_enqueue(&(sim_op){.run = r_ring_attention_backward,
                          .a = {P(dqkv), P(dkv), P(qkv), P(kv), I(kv_stride), P(dout), P(out), P(lse), I(B), I(T),
                                I(NH), I(NKV), I(HS)},
                          .extra = take_block(blk)});
}
static void r_copy_rows(const sim_op *o) {
    plait_k_copy_rows(HF(o->a[0].p), o->a[1].i, HC(o->a[2].p), o->a[3].i, o->a[4].i, o->a[5].i);
}
static void k_copy_rows(float *dst, int64_t dst_stride, const float *src, int64_t src_stride, int64_t rows,
                        int64_t width) {
    Q(r_copy_rows, P(dst), I(dst_stride), P(src), I(src_stride), I(rows), I(width));
}

/* The mixture of experts' entries (ABI 1.21), only where PLAIT_SIM_MOE=1
 * asks for them (sim_kernel_table). A host copy of what an entry reads
 * from host memory (the grouped products' offsets) or what does not fit
 * the op's slots (the router's backward's coefficients), taken at the
 * call; no room to take it ends the process (a test device). */
static void *take_bytes(const void *src, size_t n) {
    void *taken = malloc(n ? n : 1);
    if (!taken) abort();
    memcpy(taken, src, n);
    return taken;
}
#define HI32(p) ((int32_t *)H(p))
#define HD(p) ((double *)H(p))
static void r_moe_route(const sim_op *o) {
    plait_k_moe_route(HF(o->a[0].p), HF(o->a[1].p), HI32(o->a[2].p), HF(o->a[3].p), HC(o->a[4].p), HC(o->a[5].p),
                      o->a[6].i, o->a[7].i, o->a[8].i, (int)o->a[9].i);
}
static void k_moe_route(float *scores, float *lse, int32_t *idx, float *gate, const float *logits, const float *bias,
                        int64_t N, int64_t E, int64_t k, int sigmoid) {
    Q(r_moe_route, P(scores), P(lse), P(idx), P(gate), P(logits), P(bias), I(N), I(E), I(k), I(sigmoid));
}
static void r_moe_permute(const sim_op *o) {
    plait_k_moe_permute(HI32(o->a[0].p), HI32(o->a[1].p), HI32(o->a[2].p), HF(o->a[3].p), HF(o->a[4].p), HI(o->a[5].p),
                        HC(o->a[6].p), o->a[7].i, o->a[8].i, o->a[9].i, o->a[10].i, o->a[11].i);
}
static void k_moe_permute(int32_t *row, int32_t *tok, int32_t *off, float *routed, float *x, const int32_t *idx,
                          const float *inp, int64_t N, int64_t E, int64_t k, int64_t C, int64_t capacity) {
    Q(r_moe_permute, P(row), P(tok), P(off), P(routed), P(x), P(idx), P(inp), I(N), I(E), I(k), I(C), I(capacity));
}
static void r_moe_unpermute(const sim_op *o) {
    plait_k_moe_unpermute(HF(o->a[0].p), HC(o->a[1].p), HC(o->a[2].p), HC(o->a[3].p), HI(o->a[4].p), HC(o->a[5].p),
                          o->a[6].i, o->a[7].i, o->a[8].i);
}
static void k_moe_unpermute(float *out, const float *res, const float *shared, const float *y, const int32_t *row,
                            const float *gate, int64_t N, int64_t k, int64_t C) {
    Q(r_moe_unpermute, P(out), P(res), P(shared), P(y), P(row), P(gate), I(N), I(k), I(C));
}
static void r_moe_unpermute_backward(const sim_op *o) {
    plait_k_moe_unpermute_backward(HF(o->a[0].p), HD(o->a[1].p), HC(o->a[2].p), HC(o->a[3].p), HI(o->a[4].p),
                                   HC(o->a[5].p), o->a[6].i, o->a[7].i, o->a[8].i);
}
static void k_moe_unpermute_backward(float *dy_rows, double *dgate, const float *dout, const float *y,
                                     const int32_t *row, const float *gate, int64_t N, int64_t k, int64_t C) {
    Q(r_moe_unpermute_backward, P(dy_rows), P(dgate), P(dout), P(y), P(row), P(gate), I(N), I(k), I(C));
}
static void r_moe_permute_backward(const sim_op *o) {
    plait_k_moe_permute_backward(HF(o->a[0].p), HC(o->a[1].p), HI(o->a[2].p), o->a[3].i, o->a[4].i, o->a[5].i);
}
static void k_moe_permute_backward(float *dinp, const float *dx, const int32_t *row, int64_t N, int64_t k, int64_t C) {
    Q(r_moe_permute_backward, P(dinp), P(dx), P(row), I(N), I(k), I(C));
}
/* the router's backward's coefficients, beyond the op's slots */
typedef struct moe_coef {
    double aux, z, share;
    int sigmoid;
} moe_coef;
static void r_moe_route_backward(const sim_op *o) {
    const moe_coef *c = o->extra;
    plait_k_moe_route_backward(HF(o->a[0].p), HD(o->a[1].p), HC(o->a[2].p), HC(o->a[3].p), HC(o->a[4].p), HI(o->a[5].p),
                               HC(o->a[6].p), HC(o->a[7].p), o->a[8].i, o->a[9].i, o->a[10].i, c->sigmoid, c->aux, c->z,
                               c->share);
}
static void k_moe_route_backward(float *dlogits, const double *dgate, const float *logits, const float *scores,
                                 const float *lse, const int32_t *idx, const float *gate, const float *routed,
                                 int64_t N, int64_t E, int64_t k, int sigmoid, double aux, double z, double share) {
    const moe_coef c = {.aux = aux, .z = z, .share = share, .sigmoid = sigmoid};
    sim_enqueue(&(
        sim_op){.run = r_moe_route_backward,
                .a = {P(dlogits), P(dgate), P(logits), P(scores), P(lse), P(idx), P(gate), P(routed), I(N), I(E), I(k)},
                .extra = take_bytes(&c, sizeof c)});
}
static void r_moe_matmul_forward(const sim_op *o) {
    plait_k_moe_matmul_forward(HF(o->a[0].p), HC(o->a[1].p), HC(o->a[2].p), HC(o->a[3].p), o->extra, o->a[4].i,
                               o->a[5].i, o->a[6].i);
}
static void k_moe_matmul_forward(float *out, const float *inp, const float *weight, const float *bias,
                                 const int32_t *off, int64_t E, int64_t C, int64_t OC) {
    sim_enqueue(&(sim_op){.run = r_moe_matmul_forward,
                          .a = {P(out), P(inp), P(weight), P(bias), I(E), I(C), I(OC)},
                          .extra = take_bytes(off, (size_t)(E + 1) * sizeof *off)});
}
static void r_moe_matmul_backward(const sim_op *o) {
    plait_k_moe_matmul_backward(HF(o->a[0].p), HF(o->a[1].p), HF(o->a[2].p), HC(o->a[3].p), HC(o->a[4].p),
                                HC(o->a[5].p), o->extra, o->a[6].i, o->a[7].i, o->a[8].i);
}
static void k_moe_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                                  const float *weight, const int32_t *off, int64_t E, int64_t C, int64_t OC) {
    sim_enqueue(&(sim_op){.run = r_moe_matmul_backward,
                          .a = {P(dinp), P(dweight), P(dbias), P(dout), P(inp), P(weight), I(E), I(C), I(OC)},
                          .extra = take_bytes(off, (size_t)(E + 1) * sizeof *off)});
}

static const plait_kernels sim_kernels = {
    .struct_size = sizeof(plait_kernels),
    .sgemm = k_sgemm,
    .zero = k_zero,
    .copy = k_copy,
    .scale = k_scale,
    .axpy = k_axpy,
    .sumsq = k_sumsq,
    .adamw = k_adamw,
    .sumsq_exact = k_sumsq_exact,
    .sumsq_merge = k_sumsq_merge,
    .sumsq_value = plait_k_sumsq_value, /* reads a host copy */
    .matmul_forward = k_matmul_forward,
    .matmul_backward = k_matmul_backward,
    .layernorm_forward = k_layernorm_forward,
    .layernorm_backward = k_layernorm_backward,
    .gelu_forward = k_gelu_forward,
    .gelu_backward = k_gelu_backward,
    .attention_forward = k_attention_forward,
    .attention_backward = k_attention_backward,
    .embedding_forward = k_embedding_forward,
    .embedding_backward = k_embedding_backward,
    .crossentropy = k_crossentropy,
    .matmul_forward_residual = k_matmul_forward_residual,
    .add_bias_residual = k_add_bias_residual,
    .bias_backward = k_bias_backward,
    .attention_probs = k_attention_probs,
    .embedding_forward_vocab = k_embedding_forward_vocab,
    .embedding_backward_vocab = k_embedding_backward_vocab,
    .add_positions = k_add_positions,
    .logits_rowmax = k_logits_rowmax,
    .logits_sumexp = k_logits_sumexp,
    .logits_target = k_logits_target,
    .loss_rows = k_loss_rows,
    .crossentropy_backward = k_crossentropy_backward,
    .zero_f64 = k_zero_f64,
    .attention_fused_scratch = plait_k_attention_fused_scratch, /* arithmetic only */
    .attention_fused_forward = k_attention_fused_forward,
    .attention_fused_backward = k_attention_fused_backward,
    .sumsq_clip = k_sumsq_clip,
    .adamw_multi = k_adamw_multi,
    .crossentropy_fused = k_crossentropy_fused,
    .layernorm_backward_fused = k_layernorm_backward_fused,
    .matmul_forward_gelu = k_matmul_forward_gelu,
    .matmul_backward_gelu = k_matmul_backward_gelu,
    .rmsnorm_forward = k_rmsnorm_forward,
    .rmsnorm_backward = k_rmsnorm_backward,
    .rope = k_rope,
    .swiglu_forward = k_swiglu_forward,
    .swiglu_backward = k_swiglu_backward,
    .attention_gqa_forward = k_attention_gqa_forward,
    .attention_gqa_backward = k_attention_gqa_backward,
    .to_bf16 = k_to_bf16,
    .from_bf16 = k_from_bf16,
};

/* Ring attention only where PLAIT_SIM_RING=1 asks for it, the mixture of
 * experts' entries only where PLAIT_SIM_MOE=1 does: the sim device also
 * stands for a device whose table lacks them, which context parallelism
 * and a model with experts refuse (tests/device/test_cp_device.sh,
 * tests/device/test_moe_device.sh). */
const plait_kernels *sim_kernel_table(void) {
    static plait_kernels with;
    const char *ring = getenv("PLAIT_SIM_RING"), *moe = getenv("PLAIT_SIM_MOE");
    const int has_ring = ring && strcmp(ring, "1") == 0, has_moe = moe && strcmp(moe, "1") == 0;
    if (!has_ring && !has_moe) return &sim_kernels;
    with = sim_kernels;
    if (has_ring) {
        with.ring_attention_forward = k_ring_attention_forward;
        with.ring_attention_finish = k_ring_attention_finish;
        with.ring_attention_backward = k_ring_attention_backward;
        with.copy_rows = k_copy_rows;
    }
    if (has_moe) {
        with.moe_route = k_moe_route;
        with.moe_permute = k_moe_permute;
        with.moe_unpermute = k_moe_unpermute;
        with.moe_unpermute_backward = k_moe_unpermute_backward;
        with.moe_permute_backward = k_moe_permute_backward;
        with.moe_route_backward = k_moe_route_backward;
        with.moe_matmul_forward = k_moe_matmul_forward;
        with.moe_matmul_backward = k_moe_matmul_backward;
    }
    return &with;
}
