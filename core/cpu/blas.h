/*
 * The BLAS under plait's matrix products (OpenBLAS): which kernels it runs,
 * picking better ones than it detected, and its bf16 GEMM if it has one.
 *
 * Debian's OpenBLAS is built for every x86-64 (DYNAMIC_ARCH) and picks its
 * kernels from the CPU model when the library loads; a model it does not
 * know (new CPUs, cloud VMs that hide the model) gets its generic Prescott
 * kernels, several times slower. OPENBLAS_CORETYPE overrides the choice but
 * is read only when the library loads, so plait_blas_autoselect, called
 * first thing in main, sets it from cpuid's features and re-executes the
 * process once; the ranks plait starts inherit it.
 * (The BLAS's bf16 GEMM is looked up by the kernels: kernels/kernels.h.)
 *
 * Thread-safety: plait_blas_autoselect only from main before any thread;
 * the rest are reentrant. Errors: none (a failed re-exec logs a warning and
 * continues with the detected kernels).
 */
#ifndef PLAIT_CORE_CPU_BLAS_H
#define PLAIT_CORE_CPU_BLAS_H

#include <stddef.h>
#include <stdint.h>

#include "cpu/cpu_features.h"

/* The OPENBLAS_CORETYPE that runs better kernels than `detected` (an
 * OpenBLAS core name) on a CPU with `f`, or NULL when `detected` is already
 * right: "SkylakeX" with AVX512, "Haswell" with AVX2, and only in place of a
 * core name older than those. Pure. */
const char *plait_blas_pick_core(const char *detected, const plait_cpu_features *f);

/* In main, before anything else: when OpenBLAS runs kernels older than the
 * CPU's (and OPENBLAS_CORETYPE is not set by hand), set OPENBLAS_CORETYPE
 * and execv(/proc/self/exe, argv) once. Testing switch:
 * PLAIT_BLAS_PRETEND_DETECTED=<core> makes plait believe OpenBLAS detected
 * that core. */
void plait_blas_autoselect(char **argv);

/* The OpenBLAS core whose kernels run in this process ("Haswell"), NULL if
 * unknown. */
const char *plait_blas_core_in_use(void);
/* Whether they were set by hand (OPENBLAS_CORETYPE in the environment, not
 * by plait_blas_autoselect). */
int plait_blas_core_set_by_hand(void);

/* "OpenBLAS 0.3.21, Haswell kernels (selected by plait from cpuid; OpenBLAS
 * detected Prescott)", or "(as OpenBLAS detected)", or "(OPENBLAS_CORETYPE
 * set by hand)". */
void plait_blas_describe(char *buf, size_t len);


#endif
