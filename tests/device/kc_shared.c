/* What several case families build or check alike: see kc_shared.h. */
#include "device/kc_shared.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "device/kref_bf16.h"

const float *kc_rope_angles(kc_ctx *x, int64_t T, int64_t HS) {
    const int64_t hs2 = HS / 2;
    float *cs = malloc((size_t)(2 * T * hs2) * sizeof *cs);
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < hs2; i++) {
            const float angle = (float)(3 * t + 5) / powf(10000.0f, (float)(2 * i) / (float)HS);
            cs[t * hs2 + i] = cosf(angle);
            cs[T * hs2 + t * hs2 + i] = sinf(angle);
        }
    const float *d = kc_bytes(x, cs, (size_t)(2 * T * hs2) * sizeof *cs);
    free(cs);
    return d;
}

float *kc_widened(kc_ctx *x, const plait_bf16 *p, size_t n) {
    const plait_bf16 *h = kc_host_copy(x, p, n * sizeof *h);
    float *f = malloc(n * sizeof *f + 1);
    for (size_t i = 0; i < n; i++) f[i] = kref_float_of(h[i]);
    float *d = kc_bytes(x, f, n * sizeof *f);
    free(f);
    return d;
}

/* 1 if the n bf16 values at b are the floats at f rounded to nearest even */
static int rounded_from(kc_ctx *x, const plait_bf16 *b, const float *f, size_t n) {
    const plait_bf16 *hb = kc_host_copy(x, b, n * sizeof *hb);
    const float *hf = kc_host_copy(x, f, n * sizeof *hf);
    int same = 1;
    for (size_t i = 0; i < n; i++) same &= hb[i] == kref_bf16_of(hf[i]);
    return same;
}

void kc_attention_rounded(kc_ctx *x, const char *name, const plait_bf16 *out, const float *outf, size_t no,
                          const float *lse, const float *lsef, size_t nlse, const plait_bf16 *dqkv, const float *dqf,
                          size_t nq) {
    const float *hl = kc_host_copy(x, lse, nlse * sizeof *hl), *hlf = kc_host_copy(x, lsef, nlse * sizeof *hlf);
    const int same = rounded_from(x, out, outf, no) && memcmp(hl, hlf, nlse * sizeof *hl) == 0 &&
                     rounded_from(x, dqkv, dqf, nq);
    kc_value(x, name, same, KC_EXACT);
}
