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
#define KC_MAX_RESULTS 12

/* How a result compares with the reference: KC_ELEMWISE kernels within
 * 1e-5, KC_GEMM within the precision's tolerance (fp32 1e-5, tf32 1e-3,
 * bf16 2e-2), KC_EXACT bit for bit. Relative error = max |got - ref| /
 * max |ref| over the tensor. */
typedef enum { KC_ELEMWISE = 0, KC_GEMM = 1, KC_EXACT = 2 } kc_class;

typedef struct kc_result {
    const char *name;
    void *host; /* a host copy, malloc'ed */
    size_t n, elem; /* elements and their size (4: float, 8: double, 1: bytes) */
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

/* Run `fn` as above; returns the number of failures (printed). */
int kc_run(const char *name, kc_case_fn fn, const plait_kernels *cpu, const plait_kernels *gpu,
           const plait_device_ops *dev, double gemm_tol, uint64_t seed);

#endif
