#include "coll/reduce.h"

#include <string.h>

size_t plait_dtype_size(plait_dtype dtype) {
    switch (dtype) {
    case PLAIT_F32: return 4;
    case PLAIT_F64: return 8;
    case PLAIT_F16: return 2;
    case PLAIT_BF16: return 2;
    case PLAIT_I32: return 4;
    case PLAIT_I64: return 8;
    case PLAIT_U8: return 1;
    default: return 0;
    }
}

const char *plait_dtype_name(plait_dtype dtype) {
    static const char *const names[] = {"f32", "f64", "f16", "bf16", "i32", "i64", "u8"};
    return (unsigned)dtype < PLAIT_DTYPE_COUNT_V1 ? names[dtype] : "?";
}

const char *plait_redop_name(plait_redop op) {
    static const char *const names[] = {"sum", "prod", "min", "max", "avg"};
    return (unsigned)op < PLAIT_REDOP_COUNT_V1 ? names[op] : "?";
}

/* ---- half-precision conversions ---------------------------------------- */

float plait_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0) {
        /* zero or subnormal: man * 2^-24, exact in float */
        float f = (float)man * 0x1p-24f;
        return sign ? -f : f;
    }
    if (exp == 31) return plait_bits_f32(sign | 0x7f800000u | (man << 13));
    return plait_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

uint16_t plait_f32_to_f16(float f) {
    uint32_t x = plait_f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu)); /* quiet NaN */
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to infinity */
    if (ax < 0x38800000u) {
        /* below 2^-14: subnormal result m * 2^-24. Scaling by 2^24 is exact;
         * adding and removing 2^23 rounds to an integer, nearest-even. */
        float scaled = plait_bits_f32(ax) * 0x1p24f;
        float m = (scaled + 0x1p23f) - 0x1p23f;
        return (uint16_t)(sign | (uint16_t)m);
    }
    /* normal: round the 13 dropped bits to nearest even (a carry may
     * propagate into the exponent, which is the right result), then rebias
     * the exponent from 127 to 15. */
    uint32_t r = ax + 0xfffu + ((ax >> 13) & 1u);
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

float plait_bf16_to_f32(uint16_t h) { return plait_bits_f32((uint32_t)h << 16); }

uint16_t plait_f32_to_bf16(float f) {
    uint32_t x = plait_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

/* ---- kernels ------------------------------------------------------------ */
/* Plain loops: GCC and clang vectorise them at -O3 (with a run-time alias
 * check, since dst may equal a or b). Signed integer arithmetic goes through
 * the unsigned type so overflow wraps instead of being undefined. */

#define MIN_OF(x, y) ((y) < (x) ? (y) : (x))
#define MAX_OF(x, y) ((y) > (x) ? (y) : (x))

#define DEFINE_LOOP(name, T, EXPR)                                                         \
    static void name(void *dst_, const void *a_, const void *b_, size_t n) {               \
        T *dst = dst_;                                                                     \
        const T *a = a_, *b = b_;                                                          \
        for (size_t i = 0; i < n; i++) {                                                   \
            T x = a[i], y = b[i];                                                          \
            dst[i] = (EXPR);                                                               \
        }                                                                                  \
    }

DEFINE_LOOP(sum_f32, float, x + y)
DEFINE_LOOP(prod_f32, float, x * y)
DEFINE_LOOP(min_f32, float, MIN_OF(x, y))
DEFINE_LOOP(max_f32, float, MAX_OF(x, y))
DEFINE_LOOP(sum_f64, double, x + y)
DEFINE_LOOP(prod_f64, double, x * y)
DEFINE_LOOP(min_f64, double, MIN_OF(x, y))
DEFINE_LOOP(max_f64, double, MAX_OF(x, y))
DEFINE_LOOP(sum_i32, int32_t, (int32_t)((uint32_t)x + (uint32_t)y))
DEFINE_LOOP(prod_i32, int32_t, (int32_t)((uint32_t)x * (uint32_t)y))
DEFINE_LOOP(min_i32, int32_t, MIN_OF(x, y))
DEFINE_LOOP(max_i32, int32_t, MAX_OF(x, y))
DEFINE_LOOP(sum_i64, int64_t, (int64_t)((uint64_t)x + (uint64_t)y))
DEFINE_LOOP(prod_i64, int64_t, (int64_t)((uint64_t)x * (uint64_t)y))
DEFINE_LOOP(min_i64, int64_t, MIN_OF(x, y))
DEFINE_LOOP(max_i64, int64_t, MAX_OF(x, y))
DEFINE_LOOP(sum_u8, uint8_t, (uint8_t)(x + y))
DEFINE_LOOP(prod_u8, uint8_t, (uint8_t)((unsigned)x * (unsigned)y))
DEFINE_LOOP(min_u8, uint8_t, MIN_OF(x, y))
DEFINE_LOOP(max_u8, uint8_t, MAX_OF(x, y))

#define HALF_OP_SUM(x, y) ((x) + (y))
#define HALF_OP_PROD(x, y) ((x) * (y))
#define HALF_OP_MIN(x, y) MIN_OF(x, y)
#define HALF_OP_MAX(x, y) MAX_OF(x, y)

/* Half types: convert a block to float, combine, round back. The block keeps
 * the float temporaries in L1 and lets the float step vectorise. */
#define HALF_BLOCK 256
#define DEFINE_HALF(name, TO_F, FROM_F, OP)                                                \
    static void name(void *dst_, const void *a_, const void *b_, size_t n) {               \
        uint16_t *dst = dst_;                                                              \
        const uint16_t *a = a_, *b = b_;                                                   \
        float fa[HALF_BLOCK], fb[HALF_BLOCK];                                              \
        for (size_t base = 0; base < n; base += HALF_BLOCK) {                              \
            size_t m = n - base < HALF_BLOCK ? n - base : HALF_BLOCK;                      \
            for (size_t i = 0; i < m; i++) {                                               \
                fa[i] = TO_F(a[base + i]);                                                 \
                fb[i] = TO_F(b[base + i]);                                                 \
            }                                                                              \
            for (size_t i = 0; i < m; i++) fa[i] = OP(fa[i], fb[i]);                       \
            for (size_t i = 0; i < m; i++) dst[base + i] = FROM_F(fa[i]);                  \
        }                                                                                  \
    }

DEFINE_HALF(sum_f16, plait_f16_to_f32, plait_f32_to_f16, HALF_OP_SUM)
DEFINE_HALF(prod_f16, plait_f16_to_f32, plait_f32_to_f16, HALF_OP_PROD)
DEFINE_HALF(min_f16, plait_f16_to_f32, plait_f32_to_f16, HALF_OP_MIN)
DEFINE_HALF(max_f16, plait_f16_to_f32, plait_f32_to_f16, HALF_OP_MAX)
DEFINE_HALF(sum_bf16, plait_bf16_to_f32, plait_f32_to_bf16, HALF_OP_SUM)
DEFINE_HALF(prod_bf16, plait_bf16_to_f32, plait_f32_to_bf16, HALF_OP_PROD)
DEFINE_HALF(min_bf16, plait_bf16_to_f32, plait_f32_to_bf16, HALF_OP_MIN)
DEFINE_HALF(max_bf16, plait_bf16_to_f32, plait_f32_to_bf16, HALF_OP_MAX)

typedef void (*reduce_fn)(void *, const void *, const void *, size_t);

/* [dtype][op]; AVG uses the SUM kernel. */
static const reduce_fn kernels[PLAIT_DTYPE_COUNT_V1][4] = {
    [PLAIT_F32] = {sum_f32, prod_f32, min_f32, max_f32},
    [PLAIT_F64] = {sum_f64, prod_f64, min_f64, max_f64},
    [PLAIT_F16] = {sum_f16, prod_f16, min_f16, max_f16},
    [PLAIT_BF16] = {sum_bf16, prod_bf16, min_bf16, max_bf16},
    [PLAIT_I32] = {sum_i32, prod_i32, min_i32, max_i32},
    [PLAIT_I64] = {sum_i64, prod_i64, min_i64, max_i64},
    [PLAIT_U8] = {sum_u8, prod_u8, min_u8, max_u8},
};

void plait_reduce(void *dst, const void *a, const void *b, size_t n, plait_dtype dtype,
                  plait_redop op) {
    if (n == 0 || (unsigned)dtype >= PLAIT_DTYPE_COUNT_V1 || (unsigned)op >= PLAIT_REDOP_COUNT_V1)
        return;
    kernels[dtype][op == PLAIT_AVG ? PLAIT_SUM : op](dst, a, b, n);
}

void plait_reduce_finish_avg(void *buf, size_t n, plait_dtype dtype, int group_size) {
    if (group_size <= 1) return;
    switch (dtype) {
    case PLAIT_F32: {
        float *x = buf, d = (float)group_size;
        for (size_t i = 0; i < n; i++) x[i] /= d;
        break;
    }
    case PLAIT_F64: {
        double *x = buf, d = (double)group_size;
        for (size_t i = 0; i < n; i++) x[i] /= d;
        break;
    }
    case PLAIT_F16: {
        uint16_t *x = buf;
        float d = (float)group_size;
        for (size_t i = 0; i < n; i++) x[i] = plait_f32_to_f16(plait_f16_to_f32(x[i]) / d);
        break;
    }
    case PLAIT_BF16: {
        uint16_t *x = buf;
        float d = (float)group_size;
        for (size_t i = 0; i < n; i++) x[i] = plait_f32_to_bf16(plait_bf16_to_f32(x[i]) / d);
        break;
    }
    case PLAIT_I32: {
        int32_t *x = buf;
        for (size_t i = 0; i < n; i++) x[i] /= group_size;
        break;
    }
    case PLAIT_I64: {
        int64_t *x = buf;
        for (size_t i = 0; i < n; i++) x[i] /= group_size;
        break;
    }
    case PLAIT_U8: {
        uint8_t *x = buf;
        for (size_t i = 0; i < n; i++) x[i] = (uint8_t)(x[i] / group_size);
        break;
    }
    default: break;
    }
}
