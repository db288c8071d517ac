#include "cpu/blas.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/log.h"

/* Set in the environment before the re-exec: the core OpenBLAS had
 * detected, so the re-executed process can say what it replaced. */
#define SELECTED_VAR "PLAIT_BLAS_SELECTED_OVER"

static int in_list(const char *name, const char *const *list) {
    for (int i = 0; list[i]; i++)
        if (strcmp(name, list[i]) == 0) return 1;
    return 0;
}

const char *plait_blas_pick_core(const char *detected, const plait_cpu_features *f) {
    static const char *const avx512_cores[] = {"SkylakeX", "Cooperlake", "SapphireRapids", NULL};
    static const char *const avx2_cores[] = {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids", NULL};
    if (!detected) return NULL;
    if (f->has[PLAIT_CPU_AVX512] && !in_list(detected, avx512_cores)) return "SkylakeX";
    if (f->has[PLAIT_CPU_AVX2] && !in_list(detected, avx2_cores)) return "Haswell";
    return NULL;
}

void plait_blas_autoselect(char **argv) {
    if (getenv("OPENBLAS_CORETYPE") || getenv(SELECTED_VAR)) return;
    const char *detected = getenv("PLAIT_BLAS_PRETEND_DETECTED");
    if (!detected || !*detected) detected = openblas_get_corename();
    plait_cpu_features f;
    plait_cpu_detect(&f);
    const char *pick = plait_blas_pick_core(detected, &f);
    if (!pick) return;
    if (setenv(SELECTED_VAR, detected, 1) != 0 || setenv("OPENBLAS_CORETYPE", pick, 1) != 0) return;
    execv("/proc/self/exe", argv);
    plait_log(PLAIT_LOG_WARN, "blas",
              "OpenBLAS runs its %s kernels on this CPU and could not be restarted with OPENBLAS_CORETYPE=%s "
              "(re-exec failed); set OPENBLAS_CORETYPE=%s for faster products",
              detected, pick, pick);
    unsetenv("OPENBLAS_CORETYPE");
}

const char *plait_blas_core_in_use(void) { return openblas_get_corename(); }

int plait_blas_core_set_by_hand(void) { return getenv("OPENBLAS_CORETYPE") && !getenv(SELECTED_VAR); }

void plait_blas_describe(char *buf, size_t len) {
    char version[64] = "OpenBLAS";
    const char *config = openblas_get_config();
    if (config) {
        /* "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ...": the first two words */
        const char *sp = strchr(config, ' ');
        size_t n = sp ? strcspn(sp + 1, " ") + (size_t)(sp + 1 - config) : strlen(config);
        snprintf(version, sizeof version, "%.*s", (int)n, config);
    }
    const char *core = openblas_get_corename();
    const char *over = getenv(SELECTED_VAR), *hand = getenv("OPENBLAS_CORETYPE");
    char how[160];
    if (over && hand)
        snprintf(how, sizeof how, "selected by plait from cpuid; OpenBLAS detected %s", over);
    else if (hand)
        snprintf(how, sizeof how, "OPENBLAS_CORETYPE=%s set by hand", hand);
    else
        snprintf(how, sizeof how, "as OpenBLAS detected");
    snprintf(buf, len, "%s, %s kernels (%s)", version, core ? core : "unknown", how);
}

