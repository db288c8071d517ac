/* Wire formats of compressed collectives: see compress.h. */
#include "coll/compress.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "coll/reduce.h"

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

/* int8: s = max|x| / 127; q = round(x / s). */
static float int8_scale(const float *x, size_t m) {
    float amax = 0.0f;
    for (size_t i = 0; i < m; i++) {
        if (!isfinite(x[i])) return NAN;
        float a = fabsf(x[i]);
        if (a > amax) amax = a;
    }
    return amax / 127.0f;
}

static void int8_block(int8_t *q, const float *x, size_t m, float s) {
    for (size_t i = 0; i < m; i++) {
        float v = s > 0.0f ? nearbyintf(x[i] / s) : 0.0f; /* a NaN scale: decodes as NaN anyway */
        q[i] = (int8_t)(v > 127.0f ? 127 : v < -127.0f ? -127 : (int)v);
    }
}

/* onebit: s = sqrt(mean x^2) over the block, summed in order (double). */
static float onebit_scale(const float *x, size_t m) {
    double sum = 0.0;
    for (size_t i = 0; i < m; i++) {
        if (!isfinite(x[i])) return NAN;
        sum += (double)x[i] * (double)x[i];
    }
    return (float)sqrt(sum / (double)m);
}

/* One block of m values starting at value `first` of the message: x holds
 * the values to encode (residual already added); writes the block's scale
 * and values or bits, and the residual when given. */
static void encode_block(plait_compression scheme, void *dst, size_t n, size_t first, const float *x, size_t m,
                         float *residual) {
    float *scales = dst;
    size_t b = first / block_of(scheme);
    if (scheme == PLAIT_COMPRESS_INT8) {
        int8_t *q = (int8_t *)(scales + blocks_of(scheme, n)) + first;
        float s = int8_scale(x, m);
        scales[b] = s;
        int8_block(q, x, m, s);
        return;
    }
    unsigned char *bits = (unsigned char *)(scales + blocks_of(scheme, n));
    float s = onebit_scale(x, m);
    scales[b] = s;
    for (size_t i = 0; i < m; i++) {
        size_t j = first + i;
        if (x[i] < 0.0f) bits[j / 8] |= (unsigned char)(1u << (j % 8));
        else bits[j / 8] &= (unsigned char)~(1u << (j % 8));
        /* a non-finite block leaves no residual behind: it would poison
         * every later step */
        if (residual) residual[i] = isfinite(s) ? x[i] - (x[i] < 0.0f ? -s : s) : 0.0f;
    }
}

void plait_compress_encode(plait_compression scheme, void *dst, const float *src, size_t n, float *residual) {
    if (scheme == PLAIT_COMPRESS_NONE) {
        memcpy(dst, src, 4 * n);
        return;
    }
    if (scheme == PLAIT_COMPRESS_BF16) {
        uint16_t *h = dst;
        for (size_t i = 0; i < n; i++) h[i] = plait_f32_to_bf16(src[i]);
        return;
    }
    if (scheme != PLAIT_COMPRESS_ONEBIT) residual = NULL;
    float x[BLOCK_MAX];
    const size_t block = block_of(scheme);
    for (size_t first = 0; first < n; first += block) {
        size_t m = n - first < block ? n - first : block;
        for (size_t i = 0; i < m; i++) x[i] = src[first + i] + (residual ? residual[first + i] : 0.0f);
        encode_block(scheme, dst, n, first, x, m, residual ? residual + first : NULL);
    }
}

void plait_compress_decode(plait_compression scheme, float *dst, const void *src, size_t n) {
    if (scheme == PLAIT_COMPRESS_NONE) {
        memcpy(dst, src, 4 * n);
        return;
    }
    if (scheme == PLAIT_COMPRESS_BF16) {
        const uint16_t *h = src;
        for (size_t i = 0; i < n; i++) dst[i] = plait_bf16_to_f32(h[i]);
        return;
    }
    const float *scales = src;
    const unsigned char *payload = (const unsigned char *)(scales + blocks_of(scheme, n));
    const size_t block = block_of(scheme);
    for (size_t i = 0; i < n; i++) {
        float s = scales[i / block];
        if (scheme == PLAIT_COMPRESS_INT8) dst[i] = (float)(int8_t)payload[i] * s;
        else dst[i] = (payload[i / 8] >> (i % 8)) & 1u ? -s : s;
    }
}

void plait_compress_round_trip(plait_compression scheme, float *dst, const float *src, size_t n, float *residual) {
    if (scheme == PLAIT_COMPRESS_NONE) {
        if (dst != src) memmove(dst, src, 4 * n);
        return;
    }
    if (scheme == PLAIT_COMPRESS_BF16) {
        for (size_t i = 0; i < n; i++) dst[i] = plait_bf16_to_f32(plait_f32_to_bf16(src[i]));
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
