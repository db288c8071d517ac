/*
 * One kernel case, written once and run on two kernel tables: the core's
 * CPU kernels (the reference) and an open device's. A case takes its
 * inputs from kc_rand/kc_ints (the same values on both runs: the generator
 * restarts from the case's seed), its outputs from kc_out (poisoned with
 * NaN, so an element a kernel leaves unwritten fails), and names what to
 * compare with kc_result. kcase.c runs each case on the CPU and twice on
 * the device, then compares: device vs CPU within the case's tolerance
 * (NaN never passes), and the two device runs bit for bit.
 */
#ifndef PLAIT_TEST_KCASE_H
#define PLAIT_TEST_KCASE_H

#include <stddef.h>
#include <stdint.h>

#include <plait/device.h>
#include <plait/kernels.h>

#define KC_MAX_BUFS 48
#define KC_MAX_RESULTS 16

/* How a result compares with the reference: KC_ELEMWISE kernels within
 * 1e-5, KC_GEMM within the precision's tolerance (fp32 1e-5, tf32 1e-3,
 * bf16 2e-2), KC_EXACT bit for bit, KC_BF16 (a result stored in bf16, or
 * computed from such) within bf16's 2e-2 in every precision. Relative
 * error = max |got - ref| / max |ref| over the tensor. */
typedef enum { KC_ELEMWISE = 0, KC_GEMM = 1, KC_EXACT = 2, KC_BF16 = 3 } kc_class;

typedef struct kc_result {
    const char *name;
    void *host; /* a host copy, malloc'ed */
    size_t n, elem; /* elements and their size (4: float, 8: double, 2: bf16, 1: bytes) */
    kc_class cls;
} kc_result;

typedef struct kc_ctx {
    const plait_kernels *k;
    const plait_device_ops *dev; /* NULL on the CPU */
    uint64_t rng;
    void *bufs[KC_MAX_BUFS];
    int n_bufs;
    void *host[KC_MAX_BUFS]; /* kc_host_copy's */
    int n_host;
    kc_result res[KC_MAX_RESULTS];
    int n_res;
} kc_ctx;

/* n floats uniform in [lo, hi) */
float *kc_rand(kc_ctx *x, size_t n, float lo, float hi);
/* the case's generator, for inputs built on the host */
uint64_t kc_next(kc_ctx *x);
/* n floats, NaN everywhere */
float *kc_out(kc_ctx *x, size_t n);
/* The same in bfloat16 (kc_rand's values rounded to nearest even; NaN). A
 * result of 2-byte elements (kc_result on a plait_bf16 pointer) compares
 * as the bf16 values widened to float. */
plait_bf16 *kc_rand_bf16(kc_ctx *x, size_t n, float lo, float hi);
plait_bf16 *kc_out_bf16(kc_ctx *x, size_t n);
/* n ints in [lo, hi); with `neg_every` > 0 every neg_every-th is -1 */
int32_t *kc_ints(kc_ctx *x, size_t n, int32_t lo, int32_t hi, int neg_every);
/* n bytes copied from host memory */
void *kc_bytes(kc_ctx *x, const void *src, size_t n);
/* A malloc'ed host copy of `bytes` at p (freed with the case). */
void *kc_host_copy(kc_ctx *x, const void *p, size_t bytes);
/* Record whether `bytes` at p and q are identical (1) or not (0), as an
 * exact result: the CPU's answer is the reference. */
void kc_same(kc_ctx *x, const char *name, const void *p, const void *q, size_t bytes);
/* Record `n` elements of `elem` bytes at p (device or host memory) to compare. */
void kc_result_add(kc_ctx *x, const char *name, const void *p, size_t n, size_t elem, kc_class cls);
#define kc_result(x, name, p, n, cls) kc_result_add((x), (name), (p), (n), sizeof *(p), (cls))
/* A host value (e.g. what sumsq returned) to compare. */
void kc_value(kc_ctx *x, const char *name, double v, kc_class cls);

typedef void (*kc_case_fn)(kc_ctx *x);

/* Host memory as a device (alloc 256-byte aligned, copy, synchronize): the
 * CPU's kernels run as the "device" of kc_run. */
const plait_device_ops *kc_host_device(void);

/* The run's precision is fp32: set by the test's main before any case
 * runs, read by the cases that check what only fp32 promises. */
extern int kc_fp32;

/* Returns from a case whose kernel table lacks `entry`: a device without
 * it fails the case (it is never skipped); the CPU reference has it. */
#define KC_NEED(x, entry)                                                                              \
    do {                                                                                               \
        if ((x)->k->struct_size < offsetof(plait_kernels, entry) + sizeof((x)->k->entry) ||            \
            !(x)->k->entry) {                                                                          \
            kc_value((x), #entry " missing", (x)->dev ? 1.0 : 0.0, KC_EXACT);                          \
            return;                                                                                    \
        }                                                                                              \
    } while (0)

/* A case and its name (PLAIT_TEST_CASES selects by name). */
typedef struct kc_named {
    const char *name;
    kc_case_fn fn;
} kc_named;

/* The float32 entries every device has, run in every precision: the GPT
 * layer's (cases_gpt.c), the embedding's and the loss's (cases_loss.c),
 * the element-wise and optimizer ones (cases_vector.c). */
extern const kc_named kc_gpt_cases[];
extern const size_t kc_gpt_count;
extern const kc_named kc_loss_cases[];
extern const size_t kc_loss_count;
extern const kc_named kc_vector_cases[];
extern const size_t kc_vector_count;
/* The bf16-activation entries' cases (ABI 1.8), run in bf16 mode against
 * the references of kref_bf16.h: the products (cases_bf16_products.c) and
 * the row kernels (cases_bf16_rows.c). */
extern const kc_named kc_bf16_product_cases[];
extern const size_t kc_bf16_product_count;
extern const kc_named kc_bf16_row_cases[];
extern const size_t kc_bf16_row_count;
/* The Llama family's entries' cases (ABI 1.10, cases_llama.c), run in
 * every precision. */
extern const kc_named kc_llama_cases[];
extern const size_t kc_llama_count;
/* The mixture of experts' entries' cases (ABI 1.21, cases_moe.c), run in
 * every precision. */
extern const kc_named kc_moe_cases[];
extern const size_t kc_moe_count;
/* Their bf16-activation forms' cases (ABI 1.22, cases_llama_bf16.c),
 * run in bf16 mode against kref_bf16.h's references. */
extern const kc_named kc_llama_bf16_cases[];
extern const size_t kc_llama_bf16_count;
/* The mixture of experts' bf16-activation forms' cases (ABI 1.29,
 * cases_moe.c), run in bf16 mode against kref_bf16.h's references. */
extern const kc_named kc_moe_bf16_cases[];
extern const size_t kc_moe_bf16_count;

/* Run `fn` as above; returns the number of failures (printed). */
int kc_run(const char *name, kc_case_fn fn, const plait_kernels *cpu, const plait_kernels *gpu,
           const plait_device_ops *dev, double gemm_tol, uint64_t seed);

#endif
