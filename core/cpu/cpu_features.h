/*
 * What this CPU can do, read with cpuid (and xgetbv: a feature counts only
 * when the OS saves its registers), for choosing BLAS kernels, refusing
 * bf16 where the CPU has no bf16 instructions, and deriving a peak.
 *
 * Thread-safety: plait_cpu_detect is reentrant; the struct is plain data.
 * Errors: none (an x86 CPU always answers cpuid; elsewhere every feature
 * reads as absent).
 */
#ifndef PLAIT_CORE_CPU_FEATURES_H
#define PLAIT_CORE_CPU_FEATURES_H

#include <stddef.h>

enum {
    PLAIT_CPU_AVX2,        /* with FMA3 */
    PLAIT_CPU_AVX512,      /* F, BW, VL and DQ: what OpenBLAS's SkylakeX kernels use */
    PLAIT_CPU_AVX512_BF16, /* vdpbf16ps */
    PLAIT_CPU_AMX_BF16,    /* AMX tiles with bf16 */
    PLAIT_CPU_N_FEATURES
};

typedef struct plait_cpu_features {
    char brand[49];  /* "AMD EPYC ...", "Intel(R) Xeon(R) ..." */
    char vendor[13]; /* "GenuineIntel", "AuthenticAMD" */
    int has[PLAIT_CPU_N_FEATURES];
} plait_cpu_features;

void plait_cpu_detect(plait_cpu_features *f);

/* The feature's name as users read it ("AVX512_BF16"); NULL out of range. */
const char *plait_cpu_feature_name(int feature);

/* Treat the features named in `list` (comma-separated, any case: avx2,
 * avx512, avx512_bf16, amx_bf16) as absent: the testing switch that shows
 * what plait does on a CPU without them. Returns 0, or -1 naming the first
 * unknown item in `bad` (size `bad_len`). */
int plait_cpu_hide(plait_cpu_features *f, const char *list, char *bad, size_t bad_len);

/* "AVX2 AVX512 AVX512_BF16" (the present features), or "no AVX2". */
void plait_cpu_feature_list(const plait_cpu_features *f, char *buf, size_t len);

#endif
