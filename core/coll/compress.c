/* Wire formats of compressed collectives: see compress.h. */
#include "coll/compress.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "coll/reduce.h"
#include "kernels/simd_clones.h"

/* values per scale: int8's, onebit's */
static size_t block_of(plait_compression scheme) {
    return scheme == PLAIT_COMPRESS_ONEBIT ? PLAIT_COMPRESS_BLOCK_ONEBIT : PLAIT_COMPRESS_BLOCK;
}
#define BLOCK_MAX PLAIT_COMPRESS_BLOCK

static const char *const names[] = PLAIT_COMPRESSION_NAMES;
#define N_SCHEMES (sizeof names / sizeof names[0] - 1)

const char *plait_compress_name(plait_compression scheme) {
    return (unsigned)scheme < N_SCHEMES ? names[scheme] : "?";
}

int plait_compress_parse(const char *name) {
    for (size_t i = 0; name && i < N_SCHEMES; i++)
        if (strcmp(name, names[i]) == 0) return (int)i;
    return -1;
}

static size_t blocks_of(plait_compression scheme, size_t n) {
    return (n + block_of(scheme) - 1) / block_of(scheme);
}

size_t plait_compress_bytes(plait_compression scheme, size_t n) {
    switch (scheme) {
    case PLAIT_COMPRESS_BF16: return 2 * n;
    case PLAIT_COMPRESS_INT8: return 4 * blocks_of(scheme, n) + n;
    case PLAIT_COMPRESS_ONEBIT: return 4 * blocks_of(scheme, n) + (n + 7) / 8;
    default: return 4 * n;
    }
}

/* The loops below are written to vectorise without -ffast-math or -march:
 * tests and selects on the floats' bit patterns in integers (float
 * comparisons with a select do not vectorise under GCC's trapping math),
 * rounding by the 1.5 * 2^23 trick instead of a libm call, sums over fixed
 * lanes (kernels/simd_clones.h compiles them for AVX-512, AVX2 and
 * baseline x86-64). A gradient bucket of millions of values is encoded and
 * decoded at a fraction of a nanosecond a value instead of the several
 * nanoseconds of a function call and a branch per value: on ranks that
 * share their cores with the math threads, the codec's time is the step's. */

#define ABS_BITS 0x7fffffffu
#define INF_BITS 0x7f800000u

/* plait_f32_to_bf16 (coll/reduce.h), branch-free. */
static inline uint32_t bf16_of(uint32_t x) {
    uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16, quiet = (x >> 16) | 0x40u;
    return (x & ABS_BITS) > INF_BITS ? quiet : rounded;
}

PLAIT_SIMD_CLONES static void bf16_encode(uint16_t *restrict h, const float *restrict src, size_t n) {
    for (size_t i = 0; i < n; i++) h[i] = (uint16_t)bf16_of(plait_f32_bits(src[i]));
}

/* dst may be src */
PLAIT_SIMD_CLONES static void bf16_round(float *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = plait_bits_f32(bf16_of(plait_f32_bits(src[i])) << 16);
}

PLAIT_SIMD_CLONES static void bf16_decode(float *restrict dst, const uint16_t *restrict h, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = plait_bits_f32((uint32_t)h[i] << 16);
}

/* The largest |x| bits of a block; INF_BITS or more: a non-finite value.
 * Non-negative floats order as their bit patterns do. */
PLAIT_SIMD_CLONES static uint32_t max_abs_bits(const float *x, size_t m) {
    uint32_t amax = 0;
    for (size_t i = 0; i < m; i++) {
        uint32_t a = plait_f32_bits(x[i]) & ABS_BITS;
        amax = a > amax ? a : amax;
    }
    return amax;
}

/* int8: s = max|x| / 127 (NaN for a non-finite block); q = round(x / s),
 * to nearest even, as nearbyintf does in the default rounding mode:
 * |x / s| <= 127 is far below 2^22, where the trick is exact. */
static float int8_scale(const float *x, size_t m) {
    uint32_t amax = max_abs_bits(x, m);
    return amax >= INF_BITS ? NAN : plait_bits_f32(amax) / 127.0f;
}

PLAIT_SIMD_CLONES static void int8_quantize(int8_t *restrict q, const float *restrict x, size_t m, float s) {
    for (size_t i = 0; i < m; i++) {
        int32_t v = (int32_t)((x[i] / s + 0x1.8p23f) - 0x1.8p23f);
        q[i] = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
    }
}

PLAIT_SIMD_CLONES static void int8_dequantize(float *restrict dst, const int8_t *restrict q, size_t m, float s) {
    for (size_t i = 0; i < m; i++) dst[i] = (float)q[i] * s;
}

/* onebit: s = sqrt(mean x^2) over the block, summed in double over 8
 * fixed lanes (lane j takes the values j, j + 8, ...) joined by a fixed
 * tree; NaN for a non-finite block (its sum of squares is then not
 * finite: a float's square cannot overflow a double). */
PLAIT_SIMD_CLONES static double sum_squares(const float *x, size_t m) {
    double acc[8] = {0};
    size_t i = 0;
    for (; i + 8 <= m; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += (double)x[i + l] * (double)x[i + l];
    for (int l = 0; i < m; i++, l++) acc[l] += (double)x[i] * (double)x[i];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

static float onebit_scale(const float *x, size_t m) {
    double sum = sum_squares(x, m);
    return isfinite(sum) ? (float)sqrt(sum / (double)m) : NAN;
}

/* Negative: the sign bit set on a non-zero, non-NaN value (x < 0.0f). */
static inline uint32_t is_negative(uint32_t x) {
    uint32_t a = x & ABS_BITS;
    return (x >> 31) & (a != 0) & (a <= INF_BITS);
}

/* Sign bits of x[0, m) (m <= BLOCK_MAX) into bits (byte j / 8, bit j % 8;
 * the last byte's unused bits 0), and the residual x - decoded where asked
 * (0 when the block is not finite: it would poison every later step).
 * Eight 0/1 bytes b0..b7 (b0 the lowest) become one byte of bits by one
 * product: byte j of the multiplier is 1 << (7 - j), so b_k times byte
 * 7 - k lands on bit 56 + k, and no other partial product reaches the top
 * byte (checked for all 256 patterns in test_coll_compress). */
PLAIT_SIMD_CLONES static void onebit_signs(unsigned char *restrict bits, float *restrict residual,
                                           const float *restrict x, size_t m, float s) {
    unsigned char neg[BLOCK_MAX + 8];
    for (size_t i = 0; i < m; i++) neg[i] = (unsigned char)is_negative(plait_f32_bits(x[i]));
    for (size_t i = m; i % 8; i++) neg[i] = 0;
    for (size_t j = 0; j < m; j += 8) {
        uint64_t v = 0;
        for (unsigned k = 0; k < 8; k++) v |= (uint64_t)neg[j + k] << (8 * k);
        bits[j / 8] = (unsigned char)((v * 0x0102040810204080ull) >> 56);
    }
    if (!residual) return;
    if (!isfinite(s)) {
        memset(residual, 0, m * sizeof *residual);
        return;
    }
    uint32_t sb = plait_f32_bits(s);
    for (size_t i = 0; i < m; i++) residual[i] = x[i] - plait_bits_f32(sb | (uint32_t)neg[i] << 31);
}

/* +s or -s by the bits: the sign bit flipped, as -s does. */
PLAIT_SIMD_CLONES static void onebit_decode(float *restrict dst, const unsigned char *restrict bits, size_t m,
                                            float s) {
    uint32_t sb = plait_f32_bits(s);
    for (size_t i = 0; i < m; i++) dst[i] = plait_bits_f32(sb ^ (uint32_t)((bits[i / 8] >> (i % 8)) & 1u) << 31);
}

/* One block of m values starting at value `first` (a multiple of the
 * block) of a message of n: x holds the values to encode (residual already
 * added); writes the block's scale and values or bits, and the residual
 * when given. */
static void encode_block(plait_compression scheme, void *dst, size_t n, size_t first, const float *x, size_t m,
                         float *residual) {
    float *scales = dst;
    size_t b = first / block_of(scheme);
    if (scheme == PLAIT_COMPRESS_INT8) {
        float s = int8_scale(x, m);
        int8_t *q = (int8_t *)(scales + blocks_of(scheme, n)) + first;
        scales[b] = s;
        if (s > 0.0f) int8_quantize(q, x, m, s);
        else memset(q, 0, m); /* all zero, or a NaN scale: decodes as NaN anyway */
        return;
    }
    float s = onebit_scale(x, m);
    scales[b] = s;
    onebit_signs((unsigned char *)(scales + blocks_of(scheme, n)) + first / 8, residual, x, m, s);
}

void plait_compress_encode(plait_compression scheme, void *dst, const float *src, size_t n, float *residual) {
    if (scheme == PLAIT_COMPRESS_NONE) {
        memcpy(dst, src, 4 * n);
        return;
    }
    if (scheme == PLAIT_COMPRESS_BF16) {
        bf16_encode(dst, src, n);
        return;
    }
    if (scheme != PLAIT_COMPRESS_ONEBIT) residual = NULL;
    const size_t block = block_of(scheme);
    float x[BLOCK_MAX];
    for (size_t first = 0; first < n; first += block) {
        size_t m = n - first < block ? n - first : block;
        const float *v = src + first;
        if (residual) {
            for (size_t i = 0; i < m; i++) x[i] = v[i] + residual[first + i];
            v = x;
        }
        encode_block(scheme, dst, n, first, v, m, residual ? residual + first : NULL);
    }
}

void plait_compress_decode(plait_compression scheme, float *dst, const void *src, size_t n) {
    if (scheme == PLAIT_COMPRESS_NONE) {
        memcpy(dst, src, 4 * n);
        return;
    }
    if (scheme == PLAIT_COMPRESS_BF16) {
        bf16_decode(dst, src, n);
        return;
    }
    const float *scales = src;
    const unsigned char *payload = (const unsigned char *)(scales + blocks_of(scheme, n));
    const size_t block = block_of(scheme);
    for (size_t first = 0; first < n; first += block) {
        size_t m = n - first < block ? n - first : block;
        float s = scales[first / block];
        if (scheme == PLAIT_COMPRESS_INT8) int8_dequantize(dst + first, (const int8_t *)payload + first, m, s);
        else onebit_decode(dst + first, payload + first / 8, m, s);
    }
}

void plait_compress_round_trip(plait_compression scheme, float *dst, const float *src, size_t n, float *residual) {
    if (scheme == PLAIT_COMPRESS_NONE) {
        if (dst != src) memmove(dst, src, 4 * n);
        return;
    }
    if (scheme == PLAIT_COMPRESS_BF16) {
        bf16_round(dst, src, n);
        return;
    }
    /* block by block through a one-block message, so dst may be src */
    unsigned char enc[4 + BLOCK_MAX];
    const size_t block = block_of(scheme);
    for (size_t first = 0; first < n; first += block) {
        size_t m = n - first < block ? n - first : block;
        plait_compress_encode(scheme, enc, src + first, m, residual ? residual + first : NULL);
        plait_compress_decode(scheme, dst + first, enc, m);
    }
}
