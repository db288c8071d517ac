/*
 * The peak MFU figures are measured against (the progress line, metrics.csv
 * and `plait bench train`).
 *
 * A rank's peak is the GEMM rate of its own math threads, in the run's
 * precision (plait_sgemm_peak: products go through plait_k_sgemm, so bf16
 * is measured in bf16), measured by rank 0 at start while the other ranks wait in a
 * collective (so no other rank computes), or given as [run] mfu_peak. It is
 * measured once per machine (PLAIT_CPU_PEAK_TRIES short tries, the best
 * kept: ~1 s) and cached: the file ${XDG_CACHE_HOME:-~/.cache}/plait/peak.tsv
 * holds one line per (machine: host name and machine-id, CPU, cores, BLAS
 * kernels, threads, precision) with the rate, when and over how many tries
 * it was measured, and the share of its threads' time the measuring
 * process got. Later runs use that figure as it is, so MFU is comparable
 * from run to run on one machine; `plait doctor --peak` measures it again
 * and replaces it. A figure measured while something else held the cores
 * (the process got less than PLAIT_CPU_PEAK_QUIET of its threads' time) is
 * too low and would inflate MFU for good: it is kept only until a later
 * run measures again: the higher figure is kept, and marked quiet once a
 * measurement had the cores. The job's peak is the rank's times the
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

/* One rank's GEMM rate on this CPU, as the MFU peak takes it. */
#define PLAIT_CPU_PEAK_TRIES 5
#define PLAIT_CPU_PEAK_QUIET 0.8 /* below this share of its threads' time, the cores were busy */
typedef struct plait_cpu_peak {
    double flops;       /* FLOP/s, 0 when it could not be measured */
    double share;       /* CPU time / (threads x wall) of the best try: 1 = the cores were its own */
    long long when;     /* unix time of the measurement */
    int tries;          /* how many tries it is the best of (0: a cache line from before tries were recorded) */
    int from_cache;     /* read from the cache, not measured now */
    int stored;         /* measured now and written to the cache */
    char path[4096];    /* the cache file ("" when there is no home to keep one in) */
    char key[512];      /* its line's key: machine, CPU, cores, BLAS kernels, threads, precision */
} plait_cpu_peak;
/* How plait_cpu_peak_get gets it. */
typedef enum {
    PLAIT_PEAK_CACHED_OR_MEASURED, /* the cache's figure, else measured now and cached */
    PLAIT_PEAK_MEASURED,           /* measured now and cached, replacing the cache's figure */
    PLAIT_PEAK_CACHED_ONLY         /* the cache's figure or nothing (flops 0): no measurement */
} plait_peak_how;
/* The rate for `threads` math threads in the kernels' current precision:
 * the cache's figure for this machine, or measured now over
 * PLAIT_CPU_PEAK_TRIES tries and cached, as `how` says. Under
 * PLAIT_PEAK_CACHED_OR_MEASURED a cached figure measured while the cores
 * were busy is measured again (from_cache 0), the higher figure kept. */
void plait_cpu_peak_get(int threads, plait_peak_how how, plait_cpu_peak *out);

/* The cache's rate for `key` in the peak cache at `path` (lines
 * "key\tGFLOP/s\tunix time\ttries\tshare", the last line for a key
 * winning): GFLOP/s, with *when, *tries and *share (the share of its
 * threads' time, 1 for a line from before shares were recorded or one out
 * of range) set; 0, the outputs untouched, when there is no such line or
 * the file cannot be read (or is not a regular file). Owns nothing.
 * Used by plait_cpu_peak_get; public so that the reader can be fuzzed. */
double plait_mfu_peak_cache_lookup(const char *path, const char *key, long long *when, int *tries, double *share);

/* "; the cores were busy (...)" when `p` was measured while they were,
 * else "". */
void plait_cpu_peak_busy_text(const plait_cpu_peak *p, char *buf, size_t len);

/* The peak for ranks of `threads` math threads, `local_ranks` of them on
 * this host, `world` in all, in the kernels' current precision. */
void plait_mfu_peak_get(const plait_config *cfg, int threads, int local_ranks, int world, plait_mfu_peak *out);

/* MFU = achieved / peak as "31.2%", "n/a" (no peak) or "error: 123% of the
 * peak" (above 100%: a measurement error, not a figure). Returns the
 * fraction, or NAN when it is not a figure. */
double plait_mfu_text(double achieved_flops, double peak_flops, char *buf, size_t len);

#endif
