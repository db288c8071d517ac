/*
 * cuBLASLt, loaded by open() with dlopen rather than linked: the library is
 * over 500 MB and takes about a second to map, which every `plait plugins`
 * and every process that merely probes would otherwise pay, and the plugin
 * must load on machines without it. The functions plait uses are looked up
 * once into pc_lt; the handle and the fixed workspace live until close().
 * The emulated build (tests/cuda_emu) loads a stand-in from PC_LT_LIBRARY.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include <plait/plugin.h>

#include "lt.h"

pc_lt_api pc_lt;

static void *g_lib;

#define LT_SYMBOLS(X)                                                                                       \
    X(create, "cublasLtCreate")                                                                              \
    X(destroy, "cublasLtDestroy")                                                                            \
    X(status_string, "cublasLtGetStatusString")                                                              \
    X(matmul, "cublasLtMatmul")                                                                              \
    X(desc_create, "cublasLtMatmulDescCreate")                                                               \
    X(desc_destroy, "cublasLtMatmulDescDestroy")                                                             \
    X(desc_set, "cublasLtMatmulDescSetAttribute")                                                            \
    X(layout_create, "cublasLtMatrixLayoutCreate")                                                           \
    X(layout_destroy, "cublasLtMatrixLayoutDestroy")                                                         \
    X(layout_set, "cublasLtMatrixLayoutSetAttribute")                                                        \
    X(pref_create, "cublasLtMatmulPreferenceCreate")                                                         \
    X(pref_destroy, "cublasLtMatmulPreferenceDestroy")                                                       \
    X(pref_set, "cublasLtMatmulPreferenceSetAttribute")                                                      \
    X(heuristic, "cublasLtMatmulAlgoGetHeuristic")

/* The soname of the cuBLAS major this plugin was compiled against, the
 * unversioned name, then the toolkit's directory at build time (a library
 * lacking a symbol below is refused, naming it). */
#ifdef PC_LT_LIBRARY /* the emulated build (tests/cuda_emu): its cuBLASLt stand-in, by path */
static const char *const g_names[] = {PC_LT_LIBRARY};
#else
static const char *const g_names[] = {"libcublasLt.so." PLAIT_STRINGIFY(PC_CUBLAS_MAJOR), "libcublasLt.so",
                                      PC_CUDA_LIB_DIR "/libcublasLt.so." PLAIT_STRINGIFY(PC_CUBLAS_MAJOR)};
#endif

int pc_lt_open(size_t workspace_bytes) {
    const plait_host *h = pc.host;
    char tried[512] = "";
    for (size_t i = 0; i < sizeof g_names / sizeof g_names[0] && !g_lib; i++) {
        g_lib = dlopen(g_names[i], RTLD_NOW | RTLD_LOCAL);
        if (!g_lib) {
            size_t used = strlen(tried);
            snprintf(tried + used, sizeof tried - used, "%s%s", used ? "; " : "", dlerror());
        }
    }
    if (!g_lib) {
        h->set_error(PLAIT_ERR_UNSUPPORTED, "cuda: cuBLASLt could not be loaded (%s); add the CUDA toolkit's "
                                            "lib64 to LD_LIBRARY_PATH",
                     tried);
        return -1;
    }
#define LOOKUP(field, sym)                                                                                  \
    *(void **)&pc_lt.field = dlsym(g_lib, sym);                                                             \
    if (!pc_lt.field) {                                                                                     \
        h->set_error(PLAIT_ERR_UNSUPPORTED, "cuda: the cuBLASLt library loaded lacks %s", sym);             \
        pc_lt_close();                                                                                      \
        return -1;                                                                                          \
    }
    LT_SYMBOLS(LOOKUP)
#undef LOOKUP
    cublasStatus_t s = pc_lt.create(&pc_lt.handle);
    if (s != CUBLAS_STATUS_SUCCESS) {
        h->set_error(PLAIT_ERR_SYSTEM, "cuda: cublasLtCreate: %s", pc_lt.status_string(s));
        pc_lt.handle = NULL;
        pc_lt_close();
        return -1;
    }
    if (workspace_bytes) {
        cudaError_t e = cudaMalloc(&pc_lt.workspace, workspace_bytes);
        if (e != cudaSuccess) {
            h->set_error(PLAIT_ERR_NO_MEMORY, "cuda: the cuBLASLt workspace of %zu MiB: %s", workspace_bytes >> 20,
                         cudaGetErrorString(e));
            pc_lt.workspace = NULL;
            pc_lt_close();
            return -1;
        }
    }
    pc_lt.workspace_bytes = workspace_bytes;
    return 0;
}

void pc_lt_close(void) {
    pc_gemm_forget();
    if (pc_lt.handle && pc_lt.destroy) pc_lt.destroy(pc_lt.handle);
    if (pc_lt.workspace) cudaFree(pc_lt.workspace);
    if (g_lib) dlclose(g_lib);
    g_lib = NULL;
    memset(&pc_lt, 0, sizeof pc_lt);
}
