/*
 * This machine's SGEMM rate with a given number of threads, in the kernels'
 * precision: the measurement behind the MFU peak (train/mfu_peak.h) and
 * `plait plan`'s compute rate.
 */
#ifndef PLAIT_CORE_SGEMM_PEAK_H
#define PLAIT_CORE_SGEMM_PEAK_H

/* Best SGEMM rate (FLOP/s) of square products of 1024 and 2048 with
 * `threads` threads, each size timed for at least `seconds` after an untimed
 * warm-up call (so at least one timed call per size, whatever `seconds`).
 * Restores the kernels' thread count, and the peak RSS (its 48 MB of
 * operands are freed and not the caller's: plait_peak_rss_rewind). 0 when
 * the operands cannot be allocated. Not thread-safe (it sets the process's
 * BLAS threads). */
double plait_sgemm_peak(int threads, double seconds);

#endif
