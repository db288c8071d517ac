/*
 * bf16 storage for the Adam-family plugins (adam, zero1/2/3), compiled into
 * each of them: float32 <-> bf16 conversion of tensor memory, and Adam's
 * two moments kept in bf16 ([optim] moments = bf16, Megatron-Core's
 * precision-aware optimizer with --exp-avg-dtype and --exp-avg-sq-dtype
 * bf16): 4 bytes a parameter where float32 moments take 8.
 *
 * The update widens a piece of both moments into float32 scratch, runs the
 * host's `adamw` kernel on it (the arithmetic every Adam-family plugin
 * shares) and rounds the new moments back, once each an update: an
 * element's result does not depend on how the moments are split into
 * pieces, slices or ranks, so deterministic mode stays bit-identical across
 * layouts. Checkpoints hold the moments widened to float32 (exactly), under
 * the same names as float32 moments, so runs resume across the setting (a
 * float32 checkpoint read into bf16 moments is rounded once).
 *
 * Device-agnostic (plait/device_util.h): the moments and the scratch are
 * tensor memory; the conversions are the kernel table's to_bf16/from_bf16
 * (SDK 1.23) where it has both, else loops on the host, which only a
 * device whose tensor memory is host memory allows (bf16_usable says so).
 * Not thread-safe: one per optimizer instance, used from its thread.
 */
#ifndef PLAIT_OPTIM_BF16_MOMENTS_H
#define PLAIT_OPTIM_BF16_MOMENTS_H

#include <stddef.h>

#include <plait/device_util.h>
#include <plait/host.h>
#include <plait/kernels.h>
#include <plait/optim.h>

/* 1 where this host can convert its tensor memory between float32 and
 * bf16 (the kernels, or host memory). */
int bf16_usable(const plait_host *host);
/* dst[i] = src[i] widened (exact) / rounded to nearest even (a NaN stays a
 * quiet NaN), n elements of tensor memory. */
void bf16_widen(const plait_host *host, float *dst, const plait_bf16 *src, size_t n);
void bf16_narrow(const plait_host *host, plait_bf16 *dst, const float *src, size_t n);

/* [optim] moments of `cfg`: 1 for bf16, 0 for fp32; -1 with the error set
 * (`who` names the plugin) where bf16 meets [optim] offload, whose store
 * keeps float32 moments, or a device that cannot convert. */
int bf16_moments_wanted(const plait_host *host, const plait_config *cfg, const char *who);

typedef struct bf16_moments {
    const plait_host *host;
    plait_bf16 *m, *v; /* exp_avg and exp_avg_sq, n elements each (tensor memory) */
    size_t n;
    float *scratch; /* BF16_PIECE floats each for m, v and a piece read or exported */
} bf16_moments;

/* Floats of each moment widened at once. */
#define BF16_PIECE ((size_t)1 << 16)

/* Allocate n elements of each moment, zeroed, and the scratch. NULL-safe
 * close; open leaves *out closed on failure (the message set). */
plait_status bf16_moments_open(const plait_host *host, size_t n, const char *who, bf16_moments *out);
void bf16_moments_close(bf16_moments *mo);
/* host->kernels->adamw on n elements whose moments are at [at, at + n). */
void bf16_moments_adamw(bf16_moments *mo, float *param, const float *grad, size_t at, size_t n,
                        const plait_adamw_args *args);
/* Moment `which` (0: exp_avg, 1: exp_avg_sq) at [at, at + count) widened
 * into dst, host memory. */
plait_status bf16_moments_get(bf16_moments *mo, int which, size_t at, float *dst, size_t count);
/* Fill moment `which` at [at, at + count) from `src`'s tensor `name` of
 * parameter `index`, local elements [offset, offset + count), rounded: 1
 * read, 0 the source has no such tensor (zeros written), -1 an error (set). */
int bf16_moments_load(bf16_moments *mo, int which, size_t at, const plait_value_source *src, int32_t index,
                      const char *name, size_t offset, size_t count);

#endif
