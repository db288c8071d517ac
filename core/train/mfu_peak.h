/*
 * The peak MFU figures are measured against (the progress line, metrics.csv
 * and `plait bench train`).
 *
 * A rank's peak is the GEMM rate of its own math threads, in the run's
 * precision (plait_sgemm_peak: products go through plait_k_sgemm, so bf16
 * is measured in bf16), measured by rank 0 at start while the other ranks wait in a
 * collective (so no other rank computes), or given as [run] mfu_peak. It is
 * measured once per machine and cached: the file
 * ${XDG_CACHE_HOME:-~/.cache}/plait/peak.tsv holds one line per (CPU, BLAS
 * kernels, threads, precision); later runs measure briefly (~0.2 s) and
 * raise the entry when they are faster, so it converges on the machine's
 * best rate even if the first measurement caught a busy moment. The job's peak is the rank's times the
 * ranks whose threads have cores of their own: per host, min(local ranks,
 * cores / threads), at least 1, times the hosts (hosts alike).
 *
 * On a device whose memory is not host memory (a GPU), the peak is instead
 * the device's GEMM rate through its own kernels in the run's precision,
 * measured by rank 0 at start (~0.2 s, not cached), with the datasheet's
 * peak (plait_device_info) kept beside it as the second denominator; every
 * rank is counted as having a device of its own.
 *
 * An MFU above 100% means the peak was measured wrong (a busy machine, a
 * stale cache entry): plait_mfu_text says so instead of printing a figure.
 *
 * Thread-safety: not thread-safe (sets the kernels' threads while
 * measuring). Errors: none; a cache that cannot be read or written is
 * measured around and said in `source`.
 */
#ifndef PLAIT_CORE_TRAIN_MFU_PEAK_H
#define PLAIT_CORE_TRAIN_MFU_PEAK_H

#include <stddef.h>

#include "config/config.h"

typedef struct plait_mfu_peak {
    double rank_flops; /* one rank's peak, FLOP/s (0: none) */
    double flops;      /* the job's */
    double datasheet_flops; /* on a GPU: the job's datasheet peak in the run's precision (0: none, or a CPU) */
    int ranks;         /* the ranks counted in the job's peak */
    char source[512];  /* where it came from, for the start-up line */
} plait_mfu_peak;

/* The peak for ranks of `threads` math threads, `local_ranks` of them on
 * this host, `world` in all, in the kernels' current precision. */
void plait_mfu_peak_get(const plait_config *cfg, int threads, int local_ranks, int world, plait_mfu_peak *out);

/* MFU = achieved / peak as "31.2%", "n/a" (no peak) or "error: 123% of the
 * peak" (above 100%: a measurement error, not a figure). Returns the
 * fraction, or NAN when it is not a figure. */
double plait_mfu_text(double achieved_flops, double peak_flops, char *buf, size_t len);

#endif
