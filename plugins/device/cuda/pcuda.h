/*
 * The cuda device plugin's shared state and internal interfaces (not part of
 * the SDK). Included by the C files and by the .cu kernel files (compiled as
 * C++ by nvcc, hence the extern "C" block).
 *
 * One device per process (plait/device.h): the state is one global, set up
 * by open() and torn down by close(). Kernels are queued on pc.stream by
 * the kernel table's entries, from any thread, one entry at a time
 * (kernels.c); alloc/free/copy may come from any thread and take memory.c's
 * lock where they touch shared state.
 *
 * Errors: kernels cannot fail (plait/kernels.h), so a launch or library
 * failure inside one is recorded with pc_fail() and reported by the next
 * synchronize() (or copy to the host), together with CUDA's sticky errors.
 */
#ifndef PLAIT_PCUDA_H
#define PLAIT_PCUDA_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include <plait/device.h>
#include <plait/host.h>
#include <plait/kernels.h>
#include <plait/plugin.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The plugin's name and its keys' section. The emulated build
 * (tests/cuda_emu) is the same plugin under another name, so both can be
 * installed side by side; its keys are [device.cuda_emu]'s. */
#ifndef PC_PLUGIN_NAME
#define PC_PLUGIN_NAME "cuda"
#endif
#define PC_SECTION "device." PC_PLUGIN_NAME

typedef struct pc_state {
    const plait_host *host;
    int is_open;
    int ordinal;
    cudaStream_t stream;        /* the compute stream (plait/device.h) */
    cudaStream_t comm_stream;   /* the communication stream (ABI 1.4) */
    plait_precision precision;
    int deterministic;
    int sm_count;
    /* fixed scratch made at open(): partial sums of sumsq, the host copy of
     * its result (pinned) */
    double *reduce_partials;  /* PC_REDUCE_BLOCKS doubles, device */
    double *reduce_host;      /* 1 double, pinned host */
} pc_state;

extern pc_state pc;

/* Blocks of the two-pass reductions (a fixed count: the summation order
 * depends on n alone, never on the GPU). */
#define PC_REDUCE_BLOCKS 256

/* Record the first asynchronous failure (printf-style); the next
 * synchronize() returns it. Thread-safe. */
void pc_fail(const char *fmt, ...)
#ifdef __GNUC__
    __attribute__((format(printf, 1, 2)))
#endif
    ;
/* After a launch: record a launch error of `what`, if any. */
void pc_check_launch(const char *what);
/* The recorded failure as a plait_status with the message set, clearing it;
 * PLAIT_OK if none. */
plait_status pc_take_failure(void);

/* ---- profile.c: [device.cuda] profile ------------------------------------- */
/* Nonzero while a profile is being taken (read without the lock: set by
 * open and cleared by close, which no kernel call overlaps). */
extern int pc_profile_on;
/* Start a profile written to `path` at close ("%p" in it: the process id);
 * empty or NULL: none. An error (the directory not writable) is set and
 * returned. */
plait_status pc_profile_open(const char *path);
/* The compute stream's time since the previous mark is `label`'s (with
 * `detail`, may be NULL). Nothing when no profile is taken. Thread-safe. */
void pc_profile_mark(const char *label, const char *detail);
/* The kernel-table entry whose marks follow (NULL: none), kept with each
 * mark: the same launcher called by different entries is told apart. */
void pc_profile_entry(const char *name);
/* Read every mark, write the table, end the profile. */
void pc_profile_close(void);

/* ---- trace.c: the device's work in the step trace (ABI 1.16) --------------- */
plait_status pc_trace_begin(void);
plait_status pc_trace_end(plait_device_span_fn fn, void *ctx, uint64_t *dropped);
/* Start a span of `name` (a string that outlives the step: a literal) on
 * `stream`, recorded there now: its handle, or -1 when no step is timed
 * (nothing else is done then). Until pc_trace_span_end(handle), which
 * records its end, the stream is this thread's: queue the span's work
 * between the two and nothing that waits for another thread's work on
 * the same stream. Any thread. */
int pc_trace_span_begin(plait_device_stream stream, const char *name, int is_copy, uint64_t bytes);
void pc_trace_span_end(int span);
/* Destroy the events at close(). */
void pc_trace_release(void);

/* ---- device.c: open/close ------------------------------------------------- */
plait_status pc_open(const plait_host *host, const plait_device_open_args *args, plait_device_info *info);
void pc_close(void);
/* [device.cuda] workspace_mib's default: cuBLASLt's workspace */
#define PC_WORKSPACE_MIB 32
/* [device.cuda] scratch_mib's default: the column-sum scratch allocated at
 * open (a GPT-2 350M step at batch 16 needs 4 MiB of it). */
#define PC_SCRATCH_MIB 16

/* ---- memory.c: the plait_device_ops memory functions ------------------------ */
void *pc_alloc(size_t bytes, const char *tag);
void pc_free(void *ptr);
plait_status pc_copy(void *dst, const void *src, size_t bytes, plait_copy_dir dir);
plait_status pc_copy_on(plait_device_stream stream, void *dst, const void *src, size_t bytes, plait_copy_dir dir);
/* Make this process's GPU current on the calling thread (CUDA's current
 * device is per thread); 0 if CUDA refused. */
int pc_make_current(void);
/* A failed CUDA call as a plait_status with the message set. */
plait_status pc_cuda_status(cudaError_t e, const char *what);

/* ---- events.c: streams and events (ABI 1.4) -------------------------------- */
plait_device_event *pc_event_create(void);
void pc_event_destroy(plait_device_event *ev);
plait_status pc_event_record(plait_device_event *ev, plait_device_stream stream);
plait_status pc_event_wait(plait_device_event *ev, plait_device_stream stream);
plait_status pc_event_synchronize(plait_device_event *ev);
void *pc_event_native(plait_device_event *ev);
plait_status pc_fill_zero(void *dst, size_t bytes);
plait_status pc_synchronize(void);
void pc_memory_stats(uint64_t *in_use, uint64_t *peak);
void *pc_alloc_pinned(size_t bytes, const char *tag);
void pc_free_pinned(void *ptr);
void pc_memory_reset(void);
/* A grow-only device buffer of the compute stream (kernel scratch). */
typedef struct pc_buffer {
    void *ptr;
    size_t bytes;
} pc_buffer;
/* `b` with at least `bytes`: a larger buffer is allocated and the old one
 * freed in the compute stream's order (cudaMallocAsync, cudaFreeAsync), so
 * work queued before keeps reading the old one and nothing waits: no
 * device-wide or host synchronisation. Counted in memory_stats. NULL after
 * recording the failure (pc_fail), `what` naming the scratch. Inside a
 * kernel entry only (kernels.c serialises them). */
void *pc_grow(pc_buffer *b, size_t bytes, const char *what);
void pc_grow_release(pc_buffer *b);
/* The column-sum scratch of vector.cu and norm.cu (pc_grow); freed by close(). */
void *pc_scratch(size_t bytes);
void pc_scratch_release(void);
/* Memory still allocated at close(): freed, their count returned. */
size_t pc_memory_release_all(void);

/* ---- lt.c / gemm.c: cuBLASLt --------------------------------------------- */
/* Load libcublasLt and create the handle and workspace; 0 or -1 with the
 * reason set through pc.host->set_error. */
int pc_lt_open(size_t workspace_bytes);
void pc_lt_close(void);

/* One row-major product (or a batch of them at fixed strides):
 * C = alpha * op(A) @ op(B) + beta * C (+ bias[N] on every row when bias is
 * non-NULL), in the open precision; beta * res in place of beta * C when
 * res is non-NULL. Pointers are float32 unless in_bf16/out_bf16 say
 * otherwise (leading dimensions and strides count elements either way). */
typedef struct pc_gemm {
    int trans_a, trans_b;
    int64_t M, N, K;
    float alpha, beta;
    const void *A;
    int64_t lda, stride_a;
    const void *B;
    int64_t ldb, stride_b;
    void *C;
    int64_t ldc, stride_c;
    int64_t batch; /* >= 1 */
    const void *bias;
    /* Non-NULL: what beta multiplies, in C's layout (cuBLASLt's C, with
     * the result in C, its D): a residual added without a copy. May be C. */
    const void *res;
    /* GELU around the product (batch 1), aux in C's layout: PC_GELU_FORWARD
     * writes x (the product + bias) to aux and GELU(x) to C; PC_GELU_BACKWARD
     * writes GELU'(aux)·x to C. cuBLASLt's GELU_AUX(_BIAS) and DGELU
     * epilogues where an algorithm offers them, else the product and gelu.cu. */
    int gelu;
    void *aux;
    /* in_bf16: A and B are bfloat16 already (handed to cuBLASLt as they
     * are, multiplied with float32 accumulation in every precision).
     * out_bf16 (with in_bf16 and beta 0): C, the bias and aux are bfloat16,
     * C the float32 result rounded once to nearest even. */
    int in_bf16, out_bf16;
    /* Non-NULL (a weight gradient's product: in_bf16, trans_a, one batch,
     * lda == M, no bias, no GELU): bgrad[M] += the sums over K of op(A)'s
     * rows, in float32: the bias gradient. cuBLASLt's BGRADB epilogue
     * computes them inside the product (its B is our A) into scratch, added
     * to bgrad after it; where no algorithm offers it, vector.cu's column
     * sums over A. */
    float *bgrad;
} pc_gemm;
enum { PC_GELU_NONE = 0, PC_GELU_FORWARD = 1, PC_GELU_BACKWARD = 2 };
void pc_gemm_run(const pc_gemm *g);
/* A kernel-table entry begins: bf16 copies of operands made by an earlier
 * entry are not reused (kernels.c). */
void pc_gemm_entry_begin(void);

/* ---- kernel launchers (.cu files); all queue on pc.stream ---------------- */
/* convert.cu: n floats to bfloat16 (round to nearest even) */
void pc_launch_to_bf16(void *dst, const float *src, size_t n);
void pc_launch_from_bf16(float *dst, const void *src, size_t n);
/* vector.cu */
void pc_launch_scale(float *x, size_t n, float a);
void pc_launch_axpy(float *y, const float *x, size_t n, float a);
void pc_launch_adamw(float *param, const float *grad, float *m, float *v, size_t n, float beta1,
                     float beta2, float step_size, float bc2_sqrt, float decay, float grad_scale,
                     float eps);
/* AdamW over a list of tensors, the clipping factor read from device
 * memory (plait/kernels.h adamw_multi); the scalars as pc_launch_adamw's,
 * each tensor's decay 1 - lr·weight_decay computed beside its elements. */
void pc_launch_adamw_multi(const plait_adamw_tensor *tensors, size_t count, size_t total, float beta1, float beta2,
                           float step_size, float bc2_sqrt, float lr, float eps, const float *scale);
/* plait/kernels.h sumsq_clip, on the device. */
void pc_launch_sumsq_clip(double *sumsq, float *scale, const plait_sumsq_acc *acc, double grad_clip);
/* Σ x² in double into pc.reduce_partials[0] (two passes, fixed order). */
void pc_launch_sumsq(const float *x, size_t n);
void pc_launch_res_bias(float *out, const float *res, const float *bias, int64_t rows, int64_t C,
                        int add);
void pc_launch_bias_backward(float *dbias, const float *dout, int64_t BT, int64_t OC);
/* The same from a bf16 dout (summed in float32, the same order). */
void pc_launch_bias_backward_bf16(float *dbias, const plait_bf16 *dout, int64_t BT, int64_t OC);
/* Column sums in two passes, for the parameter gradients (bias, LayerNorm):
 * rows in chunks of PC_COL_ROWS, each chunk's column sums (rows in order)
 * into partials[chunk][C], then acc[c] += the chunks' sums in chunk order.
 * Deterministic (the order depends on BT alone); not the CPU's single
 * running sum, so equal to it within rounding, not bit for bit. */
#define PC_COL_ROWS 64
static inline int64_t pc_col_chunks(int64_t BT) { return (BT + PC_COL_ROWS - 1) / PC_COL_ROWS; }
void pc_launch_col_finish(float *acc, const float *partials, int64_t chunks, int64_t C);
/* sumsq.cu */
void pc_launch_sumsq_exact(plait_sumsq_acc *acc, const float *x, size_t n);
void pc_launch_sumsq_merge(plait_sumsq_acc *dst, const plait_sumsq_acc *src);
/* norm.cu */
void pc_launch_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                 const float *weight, const float *bias, int64_t BT, int64_t C);
void pc_launch_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                  const float *inp, const float *weight, const float *mean,
                                  const float *rstd, int64_t BT, int64_t C);
void pc_launch_layernorm_backward_fused(float *dinp, const float *dres, float *dweight, float *dbias,
                                        const float *dout, const float *inp, const float *weight, const float *mean,
                                        const float *rstd, int64_t BT, int64_t C);
/* gelu.cu */
void pc_launch_gelu_forward(float *out, const float *inp, size_t n);
void pc_launch_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);
/* gelu_forward on bf16 (out may equal inp), each output rounded once */
void pc_launch_gelu_forward_bf16(plait_bf16 *out, const plait_bf16 *inp, size_t n);
/* A bf16 product's epilogue apart from cuBLASLt (gemm.c), from x[rows,N],
 * its float32 result: gelu PC_GELU_NONE: out = x + bias; PC_GELU_FORWARD:
 * aux = x + bias, out = GELU(x + bias); PC_GELU_BACKWARD: out = GELU'(aux)
 * · x (bias not read). bias (may be NULL) and aux bf16 like out; each bf16
 * written rounded once. */
void pc_launch_epilogue_bf16(plait_bf16 *out, plait_bf16 *aux, const float *x, const plait_bf16 *bias, int64_t rows,
                             int64_t N, int gelu);
/* softmax.cu: attention's causal softmax over [rows of T] and its backward */
void pc_launch_softmax_causal(float *att, int64_t BNH, int64_t T);
void pc_launch_softmax_causal_backward(float *datt, const float *att, int64_t BNH, int64_t T);
/* attention.cu: fused causal attention (plait/kernels.h); tensor_cores
 * nonzero takes the bf16 tensor-core kernels where the head size allows
 * (32, 64, 128), else the fp32 ones. The backward's Dv is B*NH*T floats
 * of scratch. */
void pc_launch_attention_fused_forward(float *out, float *lse, const float *qkv, int64_t B, int64_t T, int64_t NH,
                                       int64_t HS, int tensor_cores);
/* Allows the tensor-core kernels (attention_tc.cu) the dynamic shared
 * memory they take (two stages of tiles: 68 KiB a block at head size 128,
 * over the 48 KiB a kernel gets without asking) on the current device:
 * once per open(), after cudaSetDevice. Returns CUDA's error, if any. */
cudaError_t pc_attention_prepare(void);
/* Allows the fused cross-entropy's staged kernel (loss.cu) the dynamic
 * shared memory of a bf16 row of up to 65,536 columns (128 KiB), or what
 * the device lets a block opt in to (`optin` bytes, cudaDeviceProp's
 * sharedMemPerBlockOptin: 99 KiB on sm_86 and sm_89) where that is less;
 * wider rows take the kernel that reads them from device memory. Once per
 * open(), after cudaSetDevice. Returns CUDA's error, if any. */
cudaError_t pc_loss_prepare(size_t optin);
void pc_launch_attention_fused_backward(float *dqkv, float *Dv, const float *dout, const float *qkv, const float *out,
                                        const float *lse, int64_t B, int64_t T, int64_t NH, int64_t HS,
                                        int tensor_cores);
/* attention.cu: the same with NKV key/value heads (grouped-query, ABI
 * 1.10); the tensor cores only where NKV == NH, else the fp32 kernels. */
void pc_launch_attention_gqa_forward(float *out, float *lse, const float *qkv, int64_t B, int64_t T, int64_t NH,
                                     int64_t NKV, int64_t HS, int tensor_cores);
void pc_launch_attention_gqa_backward(float *dqkv, float *Dv, const float *dout, const float *qkv, const float *out,
                                      const float *lse, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                                      int tensor_cores);
/* llama.cu: the Llama family's RMSNorm, rotary rotation and SwiGLU gate
 * (plait/kernels.h, ABI 1.10) */
void pc_launch_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight, int64_t BT, int64_t C,
                               float eps);
void pc_launch_rmsnorm_backward(float *dinp, const float *dres, float *dweight, const float *dout, const float *inp,
                                const float *weight, const float *rstd, int64_t BT, int64_t C);
void pc_launch_rope(float *x, const float *cs, int64_t B, int64_t T, int64_t row_stride, int64_t n_heads, int64_t HS,
                    int inverse);
void pc_launch_swiglu_forward(float *out, const float *gate, const float *up, size_t n);
void pc_launch_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                               size_t n);
/* their bf16-activation forms (ABI 1.22; llama.cu, attention.cu) */
void pc_launch_rmsnorm_forward_bf16(plait_bf16 *out, float *rstd, const float *inp, const float *weight, int64_t BT,
                                    int64_t C, float eps);
void pc_launch_rmsnorm_backward_bf16(float *dinp, const float *dres, float *dweight, const plait_bf16 *dout,
                                     const float *inp, const float *weight, const float *rstd, int64_t BT, int64_t C);
void pc_launch_rope_bf16(plait_bf16 *x, const float *cs, int64_t B, int64_t T, int64_t row_stride, int64_t n_heads,
                         int64_t HS, int inverse);
void pc_launch_swiglu_forward_bf16(plait_bf16 *out, const plait_bf16 *gu, int64_t BT, int64_t F);
void pc_launch_swiglu_backward_bf16(plait_bf16 *dgu, const plait_bf16 *dout, const plait_bf16 *gu, int64_t BT,
                                    int64_t F);
void pc_launch_attention_gqa_forward_bf16(plait_bf16 *out, float *lse, const plait_bf16 *qkv, int64_t B, int64_t T,
                                          int64_t NH, int64_t NKV, int64_t HS);
void pc_launch_attention_gqa_backward_bf16(plait_bf16 *dqkv, float *Dv, const plait_bf16 *dout, const plait_bf16 *qkv,
                                           const plait_bf16 *out, const float *lse, int64_t B, int64_t T, int64_t NH,
                                           int64_t NKV, int64_t HS);
/* ring.cu: ring attention's block kernels (plait/kernels.h, ABI 1.18) */
void pc_launch_ring_attention_forward(float *out, float *mx, float *l, const float *qkv, const float *kv,
                                      int64_t kv_stride, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                                      const plait_ring_block *blk);
void pc_launch_ring_attention_finish(float *out, float *mx, const float *l, int64_t B, int64_t T, int64_t NH,
                                     int64_t HS);
void pc_launch_ring_attention_backward(float *dqkv, float *dkv, const float *qkv, const float *kv, int64_t kv_stride,
                                       const float *dout, const float *out, const float *lse, int64_t B, int64_t T,
                                       int64_t NH, int64_t NKV, int64_t HS, const plait_ring_block *blk);
/* ABI 1.25: the same kernels on bf16 q|k|v, K|V, out and dout */
void pc_launch_ring_attention_forward_bf16(float *out, float *mx, float *l, const plait_bf16 *qkv, const plait_bf16 *kv,
                                           int64_t kv_stride, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                                           const plait_ring_block *blk);
void pc_launch_ring_attention_backward_bf16(float *dqkv, float *dkv, const plait_bf16 *qkv, const plait_bf16 *kv,
                                            int64_t kv_stride, const plait_bf16 *dout, const plait_bf16 *out,
                                            const float *lse, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                                            const plait_ring_block *blk);
void pc_launch_copy_rows(float *dst, int64_t dst_stride, const float *src, int64_t src_stride, int64_t rows,
                         int64_t width);
/* moe.cu: the mixture of experts' kernels (plait/kernels.h, ABI 1.21) */
void pc_launch_moe_route(float *scores, float *lse, int32_t *idx, float *gate, const float *logits, const float *bias,
                         int64_t N, int64_t E, int64_t k, int sigmoid);
void pc_launch_moe_permute(int32_t *row, int32_t *tok, int32_t *off, float *routed, float *x, const int32_t *idx,
                           const float *inp, int64_t N, int64_t E, int64_t k, int64_t C, int64_t capacity);
void pc_launch_moe_unpermute(float *out, const float *res, const float *shared, const float *y, const int32_t *row,
                             const float *gate, int64_t N, int64_t k, int64_t C);
void pc_launch_moe_unpermute_backward(float *dy_rows, double *dgate, const float *dout, const float *y,
                                      const int32_t *row, const float *gate, int64_t N, int64_t k, int64_t C);
void pc_launch_moe_permute_backward(float *dinp, const float *dx, const int32_t *row, int64_t N, int64_t k, int64_t C);
void pc_launch_moe_route_backward(float *dlogits, const double *dgate, const float *logits, const float *scores,
                                  const float *lse, const int32_t *idx, const float *gate, const float *routed,
                                  int64_t N, int64_t E, int64_t k, int sigmoid, double aux, double z, double share);
/* the row kernels on bf16 rows (ABI 1.29) */
void pc_launch_moe_permute_bf16(int32_t *row, int32_t *tok, int32_t *off, float *routed, plait_bf16 *x,
                                const int32_t *idx, const float *inp, int64_t N, int64_t E, int64_t k, int64_t C,
                                int64_t capacity);
void pc_launch_moe_unpermute_bf16(float *out, const float *res, const plait_bf16 *shared, const plait_bf16 *y,
                                  const int32_t *row, const float *gate, int64_t N, int64_t k, int64_t C);
void pc_launch_moe_unpermute_backward_bf16(plait_bf16 *dy_rows, double *dgate, const float *dout, const plait_bf16 *y,
                                           const int32_t *row, const float *gate, int64_t N, int64_t k, int64_t C);
void pc_launch_moe_permute_backward_bf16(float *dinp, const plait_bf16 *dx, const int32_t *row, int64_t N, int64_t k,
                                         int64_t C);
/* embedding.cu */
void pc_launch_embedding_forward(float *out, const int32_t *tokens, const float *wte,
                                 int64_t vocab_start, int64_t n_rows, const float *wpe, int64_t B,
                                 int64_t T, int64_t C);
void pc_launch_embedding_backward(float *dwte, float *dwpe, const float *dout,
                                  const int32_t *tokens, int64_t vocab_start, int64_t n_rows,
                                  int64_t B, int64_t T, int64_t C);
void pc_launch_add_positions(float *out, const float *wpe, int64_t B, int64_t T, int64_t C);
/* loss.cu */
void pc_launch_crossentropy(float *losses, float *dlogits, const float *logits,
                            const int32_t *targets, int64_t BT, int64_t V, float scale);
void pc_launch_crossentropy_fused(float *losses, float *lse, double *loss_sum, float *dlogits, const float *logits,
                                  const int32_t *targets, int64_t BT, int64_t Vl, int64_t n_valid, float scale);
void pc_launch_logits_rowmax(float *rowmax, const float *logits, int64_t BT, int64_t Vl,
                             int64_t n_valid);
void pc_launch_logits_sumexp(float *sumexp, const float *logits, const float *rowmax, int64_t BT,
                             int64_t Vl, int64_t n_valid);
void pc_launch_logits_target(float *tlogit, const float *logits, const int32_t *targets,
                             int64_t vocab_start, int64_t BT, int64_t Vl, int64_t n_valid);
void pc_launch_loss_rows(float *losses, float *lse, const float *rowmax, const float *sumexp,
                         const float *tlogit, const int32_t *targets, int64_t BT,
                         double *loss_sum);
void pc_launch_crossentropy_backward(float *dlogits, const float *logits, const float *lse,
                                     const int32_t *targets, int64_t vocab_start, int64_t BT,
                                     int64_t Vl, int64_t n_valid, float scale);
/* The bf16-activation row kernels (plait/kernels.h, ABI 1.8): the float32
 * launchers' kernels templated on the activations' element type. norm.cu: */
void pc_launch_layernorm_forward_bf16(plait_bf16 *out, float *mean, float *rstd, const float *inp,
                                      const float *weight, const float *bias, int64_t BT, int64_t C);
void pc_launch_layernorm_backward_fused_bf16(float *dinp, const float *dres, float *dweight, float *dbias,
                                             const plait_bf16 *dout, const float *inp, const float *weight,
                                             const float *mean, const float *rstd, int64_t BT, int64_t C);
/* the same, dinp also stored rounded to bf16 in dinp_bf (ABI 1.9) */
void pc_launch_layernorm_backward_fused_bf16_copy(float *dinp, plait_bf16 *dinp_bf, const float *dres,
                                                  float *dweight, float *dbias, const plait_bf16 *dout,
                                                  const float *inp, const float *weight, const float *mean,
                                                  const float *rstd, int64_t BT, int64_t C);
/* attention.cu: the tensor-core kernels at head sizes 32, 64, 128 (in
 * every precision: the operands are bf16 already), else the fp32 ones;
 * qkv, out, dout and dqkv 16-byte aligned (else a recorded failure). */
void pc_launch_attention_fused_forward_bf16(plait_bf16 *out, float *lse, const plait_bf16 *qkv, int64_t B, int64_t T,
                                            int64_t NH, int64_t HS);
void pc_launch_attention_fused_backward_bf16(plait_bf16 *dqkv, float *Dv, const plait_bf16 *dout,
                                             const plait_bf16 *qkv, const plait_bf16 *out, const float *lse, int64_t B,
                                             int64_t T, int64_t NH, int64_t HS);
/* loss.cu */
void pc_launch_crossentropy_fused_bf16(float *losses, float *lse, double *loss_sum, plait_bf16 *dlogits,
                                       const plait_bf16 *logits, const int32_t *targets, int64_t BT, int64_t Vl,
                                       int64_t n_valid, float scale);

/* The kernel table (kernels.c). */
const plait_kernels *pc_kernels(void);

#ifdef __cplusplus
}
#endif
/* report.c: what plait doctor shows (plait_plugin_desc.report). */
void pc_report(const plait_host *h, const plait_config *cfg, plait_report_fn line, void *ctx);

#endif
