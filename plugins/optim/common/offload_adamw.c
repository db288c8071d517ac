/*
 * The host's AdamW for offloaded optimizer state (offload.h): the cpu
 * device's `adamw` (core/kernels/kernels_vector.c) value for value, both
 * running plait_adamw_elem (plait/kernels.h), which the cuda device's
 * per-element intrinsics also follow, so an update on the host leaves the
 * bits an update on the device would.
 *
 * Exactness rests on three things: the same expression in the same order
 * (plait_adamw_elem: each product and sum rounded to float, the bias
 * corrections in double), no contraction of a product and a sum into an FMA
 * (this file is compiled with -ffp-contract=off, see common/offload.cmake,
 * and the vector bodies below call no FMA), and element-wise independence:
 * IEEE single precision rounds a lane of a vector multiply, divide or square
 * root exactly as the scalar instruction rounds it, so the width of the
 * vectors and the split over threads change no value.
 *
 * The vector bodies are written with intrinsics rather than left to the
 * compiler: at the build's -O2, GCC's cheap cost model leaves this loop
 * scalar. One body, instantiated for SSE2 (x86-64's baseline), AVX2 and
 * AVX-512F, each compiled for its ISA by a target attribute, so the build
 * needs no -march; the widest the running CPU has is chosen at run time
 * (optim_host_isa_pick), as the crc32c of checkpoint/ chooses SSE4.2.
 */
#include "offload.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

typedef void (*adamw_body)(float *param, const float *grad, float *m, float *v, size_t n, const plait_adamw_consts *c);

static void adamw_scalar(float *restrict param, const float *restrict grad, float *restrict m, float *restrict v,
                         size_t n, const plait_adamw_consts *c) {
    for (size_t i = 0; i < n; i++) plait_adamw_elem(&param[i], grad[i], &m[i], &v[i], c);
}

#if defined(__x86_64__)
/* plait_adamw_elem over W lanes at a time, its expression in its order:
 *   g = grad·gs; p = param·decay; m' = b1·m + (1−b1)·g;
 *   v' = b2·v + ((1−b2)·g)·g; param' = p − step_size·(m' / (√v' / bc2_sqrt + eps))
 * (1−b1) and (1−b2) are the float subtractions the scalar code makes. The
 * tail (n not a multiple of W) runs the scalar function. */
#define ADAMW_VECTOR_BODY(NAME, ISA, VEC, W, LOAD, STORE, SET1, ADD, SUB, MUL, DIV, SQRT)                              \
    __attribute__((target(ISA))) static void NAME(float *restrict param, const float *restrict grad,                   \
                                                  float *restrict m, float *restrict v, size_t n,                      \
                                                  const plait_adamw_consts *c) {                                       \
        const VEC gs = SET1(c->gs), decay = SET1(c->decay), b1 = SET1(c->b1), b2 = SET1(c->b2);                        \
        const VEC omb1 = SET1(1.0f - c->b1), omb2 = SET1(1.0f - c->b2), bc2 = SET1(c->bc2_sqrt);                       \
        const VEC eps = SET1(c->eps), step_size = SET1(c->step_size);                                                  \
        size_t i = 0;                                                                                                  \
        for (; i + (W) <= n; i += (W)) {                                                                               \
            VEC g = MUL(LOAD(grad + i), gs);                                                                           \
            VEC p = MUL(LOAD(param + i), decay);                                                                       \
            VEC mi = ADD(MUL(b1, LOAD(m + i)), MUL(omb1, g));                                                          \
            VEC vi = ADD(MUL(b2, LOAD(v + i)), MUL(MUL(omb2, g), g));                                                  \
            STORE(m + i, mi);                                                                                          \
            STORE(v + i, vi);                                                                                          \
            VEC denom = ADD(DIV(SQRT(vi), bc2), eps);                                                                  \
            STORE(param + i, SUB(p, MUL(step_size, DIV(mi, denom))));                                                  \
        }                                                                                                              \
        for (; i < n; i++) plait_adamw_elem(&param[i], grad[i], &m[i], &v[i], c);                                      \
    }

ADAMW_VECTOR_BODY(adamw_sse2, "sse2", __m128, 4, _mm_loadu_ps, _mm_storeu_ps, _mm_set1_ps, _mm_add_ps, _mm_sub_ps,
                  _mm_mul_ps, _mm_div_ps, _mm_sqrt_ps)
ADAMW_VECTOR_BODY(adamw_avx2, "avx2", __m256, 8, _mm256_loadu_ps, _mm256_storeu_ps, _mm256_set1_ps, _mm256_add_ps,
                  _mm256_sub_ps, _mm256_mul_ps, _mm256_div_ps, _mm256_sqrt_ps)
ADAMW_VECTOR_BODY(adamw_avx512, "avx512f", __m512, 16, _mm512_loadu_ps, _mm512_storeu_ps, _mm512_set1_ps, _mm512_add_ps,
                  _mm512_sub_ps, _mm512_mul_ps, _mm512_div_ps, _mm512_sqrt_ps)
#endif

static const struct {
    const char *name;
    int lanes;
} isa_info[] = {
    [OPTIM_ISA_SCALAR] = {"scalar", 1},
    [OPTIM_ISA_SSE2] = {"sse2", 4},
    [OPTIM_ISA_AVX2] = {"avx2", 8},
    [OPTIM_ISA_AVX512] = {"avx512", 16},
};
#define N_ISA ((int)(sizeof isa_info / sizeof isa_info[0]))

const char *optim_host_isa_name(optim_host_isa isa) { return isa_info[isa].name; }
int optim_host_isa_lanes(optim_host_isa isa) { return isa_info[isa].lanes; }

int optim_host_isa_supported(optim_host_isa isa) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    switch (isa) {
        case OPTIM_ISA_AVX512:
            return __builtin_cpu_supports("avx512f");
        case OPTIM_ISA_AVX2:
            return __builtin_cpu_supports("avx2");
        default:
            return 1; /* SSE2 is x86-64's baseline */
    }
#else
    return isa == OPTIM_ISA_SCALAR;
#endif
}

int optim_host_isa_pick(const char *want, optim_host_isa *out, char *why, size_t cap) {
    if (!want || !*want) want = "auto";
    if (strcmp(want, "auto") == 0) {
        for (int k = N_ISA - 1; k >= 0; k--)
            if (optim_host_isa_supported((optim_host_isa)k)) {
                *out = (optim_host_isa)k;
                return 0;
            }
    }
    for (int k = 0; k < N_ISA; k++) {
        if (strcmp(want, isa_info[k].name) != 0) continue;
        if (!optim_host_isa_supported((optim_host_isa)k)) {
            snprintf(why, cap, "PLAIT_OFFLOAD_ISA = %s: this CPU does not have it", want);
            return -1;
        }
        *out = (optim_host_isa)k;
        return 0;
    }
    snprintf(why, cap,
             "PLAIT_OFFLOAD_ISA = %s: not an instruction set of the host's AdamW; use auto (the widest "
             "this CPU has), avx512, avx2, sse2 or scalar",
             want);
    return -1;
}

static adamw_body body_of(optim_host_isa isa) {
    switch (isa) {
#if defined(__x86_64__)
        case OPTIM_ISA_AVX512:
            return adamw_avx512;
        case OPTIM_ISA_AVX2:
            return adamw_avx2;
        case OPTIM_ISA_SSE2:
            return adamw_sse2;
#endif
        default:
            return adamw_scalar;
    }
}

typedef struct adamw_job {
    float *param, *m, *v;
    const float *grad;
    size_t lo, hi;
    const plait_adamw_consts *c;
    adamw_body body;
} adamw_job;

static void adamw_range(const adamw_job *j) {
    if (j->hi > j->lo) j->body(j->param + j->lo, j->grad + j->lo, j->m + j->lo, j->v + j->lo, j->hi - j->lo, j->c);
}

static void *adamw_thread(void *arg) {
    adamw_range(arg);
    return NULL;
}

#define MAX_THREADS 64
#define MIN_PER_THREAD 65536 /* below this a thread costs more than it saves */

void optim_host_adamw(float *param, const float *grad, float *m, float *v, size_t n, const plait_adamw_args *args,
                      int threads, optim_host_isa isa) {
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    if (threads < 1 || n < 2 * (size_t)MIN_PER_THREAD) threads = 1;
    if ((size_t)threads > n / MIN_PER_THREAD && n / MIN_PER_THREAD >= 1) threads = (int)(n / MIN_PER_THREAD);
    const plait_adamw_consts c = plait_adamw_consts_of(args);
    adamw_body body = body_of(isa);
    adamw_job jobs[MAX_THREADS];
    pthread_t tid[MAX_THREADS];
    int started[MAX_THREADS] = {0};
    /* each thread's range starts on a 64-byte line, so no two threads
     * write the same cache line */
    size_t per = (n + (size_t)threads - 1) / (size_t)threads;
    per = (per + 15) / 16 * 16;
    for (int t = 0; t < threads; t++) {
        size_t lo = (size_t)t * per < n ? (size_t)t * per : n, hi = lo + per < n ? lo + per : n;
        jobs[t] = (adamw_job){.param = param, .m = m, .v = v, .grad = grad, .lo = lo, .hi = hi, .c = &c, .body = body};
        /* thread 0 is the caller; a thread that cannot start runs here */
        if (t > 0 && pthread_create(&tid[t], NULL, adamw_thread, &jobs[t]) == 0) started[t] = 1;
    }
    adamw_range(&jobs[0]);
    for (int t = 1; t < threads; t++) {
        if (started[t]) pthread_join(tid[t], NULL);
        else adamw_range(&jobs[t]);
    }
}
