/*
 * Test devices (built for tests only, never installed):
 *
 * sim: stands in for a GPU so that every device path of the core and the
 * plugins runs on a CPU. Its memory is real host memory handed out at an
 * address the host cannot dereference: the allocation plus 2^62, a
 * non-canonical x86-64 address, so any host load or store of device memory
 * faults at once instead of silently working. Its memory kind is
 * PLAIT_MEM_CUDA (so the comm layer stages it for host transports and
 * plugins declaring ABI < 1.3 are refused); its kernels and copies translate
 * the addresses back and call plait's CPU kernels, so its results are the
 * cpu device's, bit for bit. fp32 only. Its page-locked memory
 * (alloc_pinned) is plain host memory, counted (sim_pinned_counts, and a
 * line at close at level info) so tests can check what the core routes
 * there.
 *
 * It reports one device, or $PLAIT_SIM_DEVICES; they all share the host's
 * memory, each rank using the ordinal it was given.
 *
 * nodev (built with SIM_NO_DEVICE): count() finds none, with a reason,
 * as the cuda device does on a machine without a GPU: the clean-failure
 * path before any rank starts.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <plait/device.h>
#include <plait/host.h>
#include <plait/plugin.h>

#include "kernels/kernels.h"

#define SIM_OFFSET ((uintptr_t)1 << 62)
#define HEADER 256

static const plait_host *g_host;
static _Atomic uint64_t g_in_use, g_peak;
static _Atomic uint64_t g_pinned_allocs, g_pinned_live; /* alloc_pinned calls; blocks not yet freed */

/* device address -> host address (HN: never NULL) */
#define HN(p) ((void *)((uintptr_t)(p) - SIM_OFFSET))
#define H(p) ((void *)((p) ? (uintptr_t)(p) - SIM_OFFSET : 0))
#define HF(p) ((float *)H(p))
#define HC(p) ((const float *)H(p))
#define HI(p) ((const int32_t *)H(p))

static plait_status sim_count(const plait_host *host, int32_t *out) {
#ifdef SIM_NO_DEVICE
    *out = 0;
    /* none is not an error of count() itself: OK, 0, and the reason */
    return host->set_error(PLAIT_OK, "no NODEV device found (the nodev test device never has one)");
#else
    (void)host;
    /* PLAIT_SIM_DEVICES: how many devices this host seems to have (default
     * 1), so tests can start one rank per "GPU" under [comm] plugin = nccl */
    const char *e = getenv("PLAIT_SIM_DEVICES");
    *out = e && atoi(e) > 0 ? atoi(e) : 1;
    return PLAIT_OK;
#endif
}

static plait_status sim_open(const plait_host *host, const plait_device_open_args *args, plait_device_info *info) {
    g_host = host;
    plait_kernels_set_log(host->log);
    if (args->precision != PLAIT_PRECISION_FP32)
        return host->set_error(PLAIT_ERR_UNSUPPORTED, "the sim test device computes in fp32 only");
    plait_kernels_set_threads(args->math_threads);
    plait_device_info mine = {.struct_size = sizeof mine, .mem_kind = PLAIT_MEM_CUDA, .ordinal = args->ordinal};
    snprintf(mine.name, sizeof mine.name, "sim (host memory at non-canonical addresses)");
    plait_fill_versioned(info, &mine, sizeof mine);
    return PLAIT_OK;
}

static void sim_close(void) {
    plait_kernels_set_threads(1);
    /* what the core routed to alloc_pinned, for tests that check it */
    if (g_host)
        g_host->log(PLAIT_LOG_INFO, SIM_NAME, "closed: %llu page-locked allocations (alloc_pinned), %llu still live",
                    (unsigned long long)atomic_load(&g_pinned_allocs), (unsigned long long)atomic_load(&g_pinned_live));
}

/* "Page-locked" memory: plain host memory (the host may use it), page
 * aligned as cudaHostAlloc's, counted so tests see what the core routed
 * here (host->alloc of PLAIT_MEM_HOST_PINNED, the comm staging pool). */
static void *sim_alloc_pinned(size_t bytes, const char *tag) {
    (void)tag;
    void *p = NULL;
    if (posix_memalign(&p, 4096, bytes ? bytes : 1) != 0) {
        g_host->set_error(PLAIT_ERR_NO_MEMORY, "sim device: cannot allocate %zu page-locked bytes", bytes);
        return NULL;
    }
    atomic_fetch_add(&g_pinned_allocs, 1);
    atomic_fetch_add(&g_pinned_live, 1);
    return p;
}

static void sim_free_pinned(void *ptr) {
    if (!ptr) return;
    atomic_fetch_sub(&g_pinned_live, 1);
    free(ptr);
}

/* For tests (found with dlsym): alloc_pinned calls so far, blocks live. */
PLAIT_EXPORT void sim_pinned_counts(uint64_t *allocs, uint64_t *live);
PLAIT_EXPORT void sim_pinned_counts(uint64_t *allocs, uint64_t *live) {
    *allocs = atomic_load(&g_pinned_allocs);
    *live = atomic_load(&g_pinned_live);
}

static void *sim_alloc(size_t bytes, const char *tag) {
    (void)tag;
    void *base = NULL;
    if (posix_memalign(&base, HEADER, bytes + HEADER) != 0) {
        g_host->set_error(PLAIT_ERR_NO_MEMORY, "sim device: cannot allocate %zu bytes", bytes);
        return NULL;
    }
    memcpy(base, &bytes, sizeof bytes);
    uint64_t now = atomic_fetch_add(&g_in_use, bytes) + bytes, peak = atomic_load(&g_peak);
    while (now > peak && !atomic_compare_exchange_weak(&g_peak, &peak, now)) {
    }
    return (void *)((uintptr_t)base + HEADER + SIM_OFFSET);
}

static void sim_free(void *ptr) {
    if (!ptr) return;
    char *base = (char *)HN(ptr) - HEADER;
    size_t bytes;
    memcpy(&bytes, base, sizeof bytes);
    atomic_fetch_sub(&g_in_use, bytes);
    free(base);
}

static plait_status sim_copy(void *dst, const void *src, size_t bytes, plait_copy_dir dir) {
    if (!bytes) return PLAIT_OK;
    switch (dir) {
    case PLAIT_COPY_TO_DEVICE: memcpy(HN(dst), src, bytes); break;
    case PLAIT_COPY_TO_HOST: memcpy(dst, HN(src), bytes); break;
    case PLAIT_COPY_ON_DEVICE: memmove(HN(dst), HN(src), bytes); break;
    default: return g_host->set_error(PLAIT_ERR_INVALID_ARG, "sim device: copy direction %d", (int)dir);
    }
    return PLAIT_OK;
}

static plait_status sim_fill_zero(void *dst, size_t bytes) {
    if (bytes) memset(HN(dst), 0, bytes);
    return PLAIT_OK;
}

static plait_status sim_synchronize(void) { return PLAIT_OK; }

static void sim_memory_stats(uint64_t *in_use, uint64_t *peak) {
    *in_use = atomic_load(&g_in_use);
    *peak = atomic_load(&g_peak);
}

/* ---- the kernels: addresses translated, then the CPU kernels ------------ */

static void k_sgemm(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                    const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    plait_k_sgemm(ta, tb, M, N, K, alpha, HC(A), lda, HC(B), ldb, beta, HF(C), ldc);
}
static void k_zero(float *x, size_t n) { plait_k_zero(HF(x), n); }
static void k_copy(float *dst, const float *src, size_t n) { plait_k_copy(HF(dst), HC(src), n); }
static void k_scale(float *x, size_t n, float a) { plait_k_scale(HF(x), n, a); }
static void k_axpy(float *y, const float *x, size_t n, float a) { plait_k_axpy(HF(y), HC(x), n, a); }
static double k_sumsq(const float *x, size_t n) { return plait_k_sumsq(HC(x), n); }
static void k_adamw(float *p, const float *g, float *m, float *v, size_t n, const plait_adamw_args *a) {
    plait_k_adamw(HF(p), HC(g), HF(m), HF(v), n, a);
}
static void k_sumsq_exact(plait_sumsq_acc *acc, const float *x, size_t n) {
    plait_k_sumsq_exact(H(acc), HC(x), n);
}
static void k_sumsq_merge(plait_sumsq_acc *dst, const plait_sumsq_acc *src) {
    plait_k_sumsq_merge(H(dst), H(src));
}
static void k_matmul_forward(float *out, const float *inp, const float *w, const float *b, int64_t BT, int64_t C,
                             int64_t OC) {
    plait_k_matmul_forward(HF(out), HC(inp), HC(w), HC(b), BT, C, OC);
}
static void k_matmul_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                              int64_t BT, int64_t C, int64_t OC) {
    plait_k_matmul_backward(HF(dinp), HF(dw), HF(db), HC(dout), HC(inp), HC(w), BT, C, OC);
}
static void k_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                                const float *b, int64_t BT, int64_t C) {
    plait_k_layernorm_forward(HF(out), HF(mean), HF(rstd), HC(inp), HC(w), HC(b), BT, C);
}
static void k_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                                 const float *w, const float *mean, const float *rstd, int64_t BT, int64_t C) {
    plait_k_layernorm_backward(HF(dinp), HF(dw), HF(db), HC(dout), HC(inp), HC(w), HC(mean), HC(rstd), BT, C);
}
static void k_gelu_forward(float *out, const float *inp, size_t n) { plait_k_gelu_forward(HF(out), HC(inp), n); }
static void k_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    plait_k_gelu_backward(HF(dinp), HC(inp), HC(dout), n);
}
static void k_attention_forward(float *out, float *att, const float *qkv, int64_t B, int64_t T, int64_t NH,
                                int64_t HS) {
    plait_k_attention_forward(HF(out), HF(att), HC(qkv), B, T, NH, HS);
}
static void k_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *att,
                                 int64_t B, int64_t T, int64_t NH, int64_t HS) {
    plait_k_attention_backward(HF(dqkv), HF(scratch), HC(dout), HC(qkv), HC(att), B, T, NH, HS);
}
static void k_embedding_forward(float *out, const int32_t *tok, const float *wte, const float *wpe, int64_t B,
                                int64_t T, int64_t C) {
    plait_k_embedding_forward(HF(out), HI(tok), HC(wte), HC(wpe), B, T, C);
}
static void k_embedding_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tok, int64_t B,
                                 int64_t T, int64_t C) {
    plait_k_embedding_backward(HF(dwte), HF(dwpe), HC(dout), HI(tok), B, T, C);
}
static void k_crossentropy(float *losses, float *dlogits, const float *logits, const int32_t *targets, int64_t BT,
                           int64_t V, float scale) {
    plait_k_crossentropy(HF(losses), HF(dlogits), HC(logits), HI(targets), BT, V, scale);
}
static void k_matmul_forward_residual(float *out, const float *res, const float *inp, const float *w, const float *b,
                                      int64_t BT, int64_t C, int64_t OC) {
    plait_k_matmul_forward_residual(HF(out), HC(res), HC(inp), HC(w), HC(b), BT, C, OC);
}
static void k_add_bias_residual(float *x, const float *res, const float *b, int64_t BT, int64_t C) {
    plait_k_add_bias_residual(HF(x), HC(res), HC(b), BT, C);
}
static void k_bias_backward(float *db, const float *dout, int64_t BT, int64_t OC) {
    plait_k_bias_backward(HF(db), HC(dout), BT, OC);
}
static void k_attention_probs(float *att, const float *qkv, int64_t B, int64_t T, int64_t NH, int64_t HS) {
    plait_k_attention_probs(HF(att), HC(qkv), B, T, NH, HS);
}
static void k_embedding_forward_vocab(float *out, const int32_t *tok, const float *wte, int64_t vs, int64_t nr,
                                      const float *wpe, int64_t B, int64_t T, int64_t C) {
    plait_k_embedding_forward_vocab(HF(out), HI(tok), HC(wte), vs, nr, HC(wpe), B, T, C);
}
static void k_embedding_backward_vocab(float *dwte, float *dwpe, const float *dout, const int32_t *tok, int64_t vs,
                                       int64_t nr, int64_t B, int64_t T, int64_t C) {
    plait_k_embedding_backward_vocab(HF(dwte), HF(dwpe), HC(dout), HI(tok), vs, nr, B, T, C);
}
static void k_add_positions(float *out, const float *wpe, int64_t B, int64_t T, int64_t C) {
    plait_k_add_positions(HF(out), HC(wpe), B, T, C);
}
static void k_logits_rowmax(float *rowmax, const float *logits, int64_t BT, int64_t Vl, int64_t nv) {
    plait_k_logits_rowmax(HF(rowmax), HC(logits), BT, Vl, nv);
}
static void k_logits_sumexp(float *sumexp, const float *logits, const float *rowmax, int64_t BT, int64_t Vl,
                            int64_t nv) {
    plait_k_logits_sumexp(HF(sumexp), HC(logits), HC(rowmax), BT, Vl, nv);
}
static void k_logits_target(float *tlogit, const float *logits, const int32_t *targets, int64_t vs, int64_t BT,
                            int64_t Vl, int64_t nv) {
    plait_k_logits_target(HF(tlogit), HC(logits), HI(targets), vs, BT, Vl, nv);
}
static void k_loss_rows(float *losses, float *lse, const float *rowmax, const float *sumexp, const float *tlogit,
                        const int32_t *targets, int64_t BT, double *loss_sum) {
    plait_k_loss_rows(HF(losses), HF(lse), HC(rowmax), HC(sumexp), HC(tlogit), HI(targets), BT, H(loss_sum));
}
static void k_crossentropy_backward(float *dlogits, const float *logits, const float *lse, const int32_t *targets,
                                    int64_t vs, int64_t BT, int64_t Vl, int64_t nv, float scale) {
    plait_k_crossentropy_backward(HF(dlogits), HC(logits), HC(lse), HI(targets), vs, BT, Vl, nv, scale);
}
static void k_zero_f64(double *dst, size_t n) { plait_k_zero_f64(H(dst), n); }

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
};

static const plait_kernels *sim_kernel_table(void) { return &sim_kernels; }

static const plait_device_ops sim_ops = {
    .struct_size = sizeof(plait_device_ops),
    .count = sim_count,
    .open = sim_open,
    .close = sim_close,
    .alloc = sim_alloc,
    .free = sim_free,
    .copy = sim_copy,
    .fill_zero = sim_fill_zero,
    .synchronize = sim_synchronize,
    .memory_stats = sim_memory_stats,
    .kernels = sim_kernel_table,
    .alloc_pinned = sim_alloc_pinned,
    .free_pinned = sim_free_pinned,
};

static const plait_plugin_desc sim_desc = {
    .struct_size = sizeof(plait_plugin_desc),
    .magic = PLAIT_PLUGIN_MAGIC,
    .abi_major = PLAIT_ABI_MAJOR,
    .abi_minor = 3,
    .kind = PLAIT_KIND_DEVICE,
    .name = SIM_NAME,
    .version = "0.0.1",
    .description = "test device: host memory at non-canonical addresses, the CPU kernels (tests only)",
    .ops = &sim_ops,
};

static const plait_plugin_desc *const sim_list[] = {&sim_desc};

PLAIT_EXPORT plait_status PLAIT_PLUGIN_ENTRY(uint32_t host_abi, const plait_host *host,
                                            const plait_plugin_desc *const **descs, size_t *count) {
    (void)host_abi;
    (void)host;
    *descs = sim_list;
    *count = 1;
    return PLAIT_OK;
}
