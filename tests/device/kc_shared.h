/*
 * What several case families (cases_*.c) build or check alike, written
 * once: the rotary angles of positions that are not 0..T-1, a bf16
 * buffer widened into float32, and the check that a bf16 attention's
 * results are the float32 entries' rounded once. Everything lives in the
 * case's memory (kcase.h) and is freed with the case; single-threaded, as
 * a case is.
 */
#ifndef PLAIT_TEST_KC_SHARED_H
#define PLAIT_TEST_KC_SHARED_H

#include "device/kcase.h"

/* The rotary table [2, T, HS/2] (cos, then sin) of positions 3t + 5 (a
 * context-parallel rank's are not 0..T-1), base 10000. */
const float *kc_rope_angles(kc_ctx *x, int64_t T, int64_t HS);

/* n floats in the case's memory: the bf16 values at p widened exactly */
float *kc_widened(kc_ctx *x, const plait_bf16 *p, size_t n);

/* Record, as one exact result `name`, whether a bf16 attention's out
 * [no] and dqkv [nq] are the float32 entries' outf and dqf rounded to
 * nearest even, and its lse [nlse] the float32 entries' lsef bit for bit. */
void kc_attention_rounded(kc_ctx *x, const char *name, const plait_bf16 *out, const float *outf, size_t no,
                          const float *lse, const float *lsef, size_t nlse, const plait_bf16 *dqkv, const float *dqf,
                          size_t nq);

#endif
