/*
 * This machine's SGEMM rate with a given number of threads, in the kernels'
 * precision: the measurement behind the MFU peak (train/mfu_peak.h) and
 * `plait plan`'s compute rate.
 */
#ifndef PLAIT_CORE_SGEMM_PEAK_H
#define PLAIT_CORE_SGEMM_PEAK_H

#include <stdint.h>

/* Best SGEMM rate (FLOP/s) of square products of 1024 and 2048 with
 * `threads` threads, each size timed for at least `seconds` after an untimed
 * warm-up call (so at least one timed call per size, whatever `seconds`).
 * Restores the kernels' thread count, and the peak RSS (its 48 MB of
 * operands are freed and not the caller's: plait_peak_rss_rewind). 0 when
 * the operands cannot be allocated. Not thread-safe (it sets the process's
 * BLAS threads). */
double plait_sgemm_peak(int threads, double seconds);

/* Rows at which a linear layer's products run at half their large-batch
 * rate with `threads` threads: the three products of a width -> 4 x width
 * layer (forward, input gradient, weight gradient) timed at 16 and 256
 * rows (best of at least `seconds` each), fitted to the saturating curve
 * rate(M) = R M / (M + h), which both rates fix: h = 16 x 256 (1 - q) /
 * (256 q - 16), q = rate(16) / rate(256). Packing the weights and the
 * threads' dispatch cost per call, whatever the rows. A width above 1024
 * is measured at 1024. Same restoring, errors (0) and thread-safety as
 * plait_sgemm_peak; 0 too when the small products run at least as fast per
 * FLOP as the large ones (or 16 times slower: no such curve). */
double plait_sgemm_half_rows(int threads, int64_t width, double seconds);

#endif
