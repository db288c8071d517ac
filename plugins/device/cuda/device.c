/*
 * The device's life cycle: open() binds this process to one GPU (its
 * compute and communication streams, cuBLASLt, fixed scratch) and describes it; close() releases all
 * of it. Also the record of asynchronous failures (pcuda.h).
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "nvidia_gpus.h"
#include "pcuda.h"

pc_state pc;

/* ---- recorded failures ---------------------------------------------------- */

static pthread_mutex_t g_fail_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_fail[512];

void pc_fail(const char *fmt, ...) {
    pthread_mutex_lock(&g_fail_lock);
    if (!g_fail[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(g_fail, sizeof g_fail, fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&g_fail_lock);
}

void pc_check_launch(const char *what) {
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) pc_fail("cuda: launching %s failed: %s", what, cudaGetErrorString(e));
    if (pc_profile_on) pc_profile_mark(what, NULL); /* each launcher checks its launches once, at its end */
}

plait_status pc_take_failure(void) {
    char msg[sizeof g_fail];
    pthread_mutex_lock(&g_fail_lock);
    memcpy(msg, g_fail, sizeof msg);
    g_fail[0] = '\0';
    pthread_mutex_unlock(&g_fail_lock);
    return msg[0] ? pc.host->set_error(PLAIT_ERR_SYSTEM, "%s", msg) : PLAIT_OK;
}

/* ---- datasheet peaks ---------------------------------------------------------- */

/* Dense (no sparsity) tensor-core peaks from NVIDIA's datasheets, matched
 * on the name CUDA reports; 0 = unknown (MFU is then not reported against
 * a datasheet). The H100 SXM and the H200 share their compute. */
static const struct {
    const char *match, *unless;
    double bf16, tf32;
} g_peaks[] = {
    {"H100 PCIe", NULL, 756e12, 378e12},
    {"H100", "PCIe", 989e12, 494e12},
    {"H200", NULL, 989e12, 494e12},
    {"A100", NULL, 312e12, 156e12},
};

static void fill_peaks(plait_device_info *info) {
    for (size_t i = 0; i < sizeof g_peaks / sizeof g_peaks[0]; i++) {
        if (!strstr(info->name, g_peaks[i].match)) continue;
        if (g_peaks[i].unless && strstr(info->name, g_peaks[i].unless)) continue;
        info->peak_flops_bf16 = g_peaks[i].bf16;
        info->peak_flops_tf32 = g_peaks[i].tf32;
        return;
    }
}

/* ---- open / close ------------------------------------------------------------- */

static const char *precision_name(plait_precision p) {
    switch (p) {
    case PLAIT_PRECISION_FP32: return "fp32";
    case PLAIT_PRECISION_TF32: return "tf32";
    case PLAIT_PRECISION_BF16: return "bf16";
    }
    return "?";
}

static plait_status open_failed(plait_status st) {
    pc_close();
    return st;
}

plait_status pc_open(const plait_host *host, const plait_device_open_args *args, plait_device_info *info) {
    if (pc.is_open) return host->set_error(PLAIT_ERR_INVALID_ARG, "cuda: the device is already open in this process");
    memset(&pc, 0, sizeof pc);
    pc.host = host;
    char why[512];
    int visible = nvidia_visible_gpus(why, sizeof why);
    if (visible <= 0) return host->set_error(PLAIT_ERR_UNSUPPORTED, "no CUDA device found (%s)", why);
    int ordinal = args->ordinal < 0 ? 0 : args->ordinal;
    if (ordinal >= visible)
        return host->set_error(PLAIT_ERR_INVALID_CONFIG,
                               "cuda: [device] ordinal %d, but this process sees %d GPU%s (ordinals 0..%d); check "
                               "CUDA_VISIBLE_DEVICES",
                               ordinal, visible, visible == 1 ? "" : "s", visible - 1);
    if ((unsigned)args->precision > PLAIT_PRECISION_BF16)
        return host->set_error(PLAIT_ERR_INVALID_ARG, "cuda: unknown precision %d", (int)args->precision);
    pc.ordinal = ordinal;
    pc.precision = args->precision;
    pc.deterministic = args->deterministic;
    pc.is_open = 1; /* from here on failures go through pc_close() */

    cudaError_t e = cudaSetDevice(ordinal);
    if (e != cudaSuccess)
        return open_failed(host->set_error(PLAIT_ERR_UNSUPPORTED, "no CUDA device found (cudaSetDevice(%d): %s: %s)",
                                           ordinal, cudaGetErrorName(e), cudaGetErrorString(e)));
    struct cudaDeviceProp prop;
    e = cudaGetDeviceProperties(&prop, ordinal);
    if (e != cudaSuccess)
        return open_failed(host->set_error(PLAIT_ERR_SYSTEM, "cuda: cudaGetDeviceProperties(%d): %s", ordinal,
                                           cudaGetErrorString(e)));
    if (prop.major < 8 && args->precision != PLAIT_PRECISION_FP32)
        return open_failed(host->set_error(PLAIT_ERR_UNSUPPORTED,
                                           "cuda: precision %s needs tensor cores of compute capability 8.0 or "
                                           "later; GPU %d (%s) is %d.%d: use [run] precision = fp32",
                                           precision_name(args->precision), ordinal, prop.name, prop.major,
                                           prop.minor));
    if (prop.major < 8)
        return open_failed(host->set_error(PLAIT_ERR_UNSUPPORTED,
                                           "cuda: GPU %d (%s) is compute capability %d.%d; this build has code for "
                                           "8.0 and 9.0 only",
                                           ordinal, prop.name, prop.major, prop.minor));
    pc.sm_count = prop.multiProcessorCount;
    e = cudaStreamCreateWithFlags(&pc.stream, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&pc.comm_stream, cudaStreamNonBlocking);
    if (e == cudaSuccess)
        e = cudaMalloc((void **)&pc.reduce_partials, PC_REDUCE_BLOCKS * sizeof(double));
    if (e == cudaSuccess) e = cudaMallocHost((void **)&pc.reduce_host, sizeof(double));
    if (e != cudaSuccess)
        return open_failed(host->set_error(PLAIT_ERR_SYSTEM, "cuda: setting up GPU %d (streams, scratch): %s",
                                           ordinal, cudaGetErrorString(e)));
    e = pc_attention_prepare();
    if (e == cudaSuccess) e = pc_loss_prepare(prop.sharedMemPerBlockOptin);
    if (e != cudaSuccess)
        return open_failed(host->set_error(PLAIT_ERR_SYSTEM,
                                           "cuda: allowing the fused attention's and cross-entropy's kernels their "
                                           "shared memory on GPU %d (cudaFuncSetAttribute): %s",
                                           ordinal, cudaGetErrorString(e)));
    /* the default where the section was not declared (a caller that opens
     * the device without the core's configuration) */
    int64_t ws_mib = PC_WORKSPACE_MIB;
    plait_value v;
    if (args->cfg && host->config_get(args->cfg, PC_SECTION, "workspace_mib", &v) == PLAIT_OK) ws_mib = v.i;
    if (pc_lt_open((size_t)(ws_mib > 0 ? ws_mib : 0) << 20) != 0) return open_failed(PLAIT_ERR_SYSTEM);
    pc_memory_reset();
    /* the column sums' scratch now, counted from the start (memory_stats) */
    int64_t scratch_mib = PC_SCRATCH_MIB;
    if (args->cfg && host->config_get(args->cfg, PC_SECTION, "scratch_mib", &v) == PLAIT_OK) scratch_mib = v.i;
    if (scratch_mib > 0 && !pc_scratch((size_t)scratch_mib << 20))
        return open_failed(pc_take_failure()); /* pc_grow's message: how much, and CUDA's answer */

    /* last, so that a profile is never left half taken by a failed open */
    if (args->cfg && host->config_get(args->cfg, PC_SECTION, "profile", &v) == PLAIT_OK &&
        pc_profile_open(v.s) != PLAIT_OK)
        return open_failed(PLAIT_ERR_INVALID_CONFIG);

    plait_device_info mine;
    memset(&mine, 0, sizeof mine);
    mine.struct_size = sizeof mine;
    mine.mem_kind = PLAIT_MEM_CUDA;
    mine.ordinal = ordinal;
    snprintf(mine.name, sizeof mine.name, "%s", prop.name);
    mine.memory_bytes = prop.totalGlobalMem;
    fill_peaks(&mine);
    if (info) {
        uint32_t want = info->struct_size ? info->struct_size : (uint32_t)sizeof mine;
        memcpy(info, &mine, want < sizeof mine ? want : sizeof mine);
        info->struct_size = want < sizeof mine ? want : (uint32_t)sizeof mine;
    }
    host->log(PLAIT_LOG_INFO, "cuda", "GPU %d: %s, %.1f GiB, %d SMs, compute %d.%d, precision %s%s", ordinal,
              prop.name, (double)prop.totalGlobalMem / (1 << 30), prop.multiProcessorCount, prop.major,
              prop.minor, precision_name(pc.precision), pc.deterministic ? ", deterministic" : "");
    return PLAIT_OK;
}

void pc_close(void) {
    if (!pc.is_open) return;
    pc_profile_close();
    if (pc.stream) cudaStreamSynchronize(pc.stream);
    if (pc.comm_stream) cudaStreamSynchronize(pc.comm_stream);
    pc_trace_release();
    pc_lt_close();
    pc_scratch_release();
    size_t leaked = pc_memory_release_all();
    if (leaked)
        pc.host->log(PLAIT_LOG_DEBUG, "cuda", "close: %zu allocation%s still held, freed", leaked,
                     leaked == 1 ? "" : "s");
    if (pc.reduce_partials) cudaFree(pc.reduce_partials);
    if (pc.reduce_host) cudaFreeHost(pc.reduce_host);
    if (pc.stream) cudaStreamDestroy(pc.stream);
    if (pc.comm_stream) cudaStreamDestroy(pc.comm_stream);
    pthread_mutex_lock(&g_fail_lock);
    g_fail[0] = '\0';
    pthread_mutex_unlock(&g_fail_lock);
    const plait_host *host = pc.host;
    memset(&pc, 0, sizeof pc);
    pc.host = host;
}
