/* plait doctor: plait itself, the CPU, its BLAS, threads, precision,
 * memory and the MFU peak (doctor.h). */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <plait/plugin.h>

#include "cpu/blas.h"
#include "cpu/cpu_features.h"
#include "doctor/doctor.h"
#include "kernels/kernels.h"
#include "launch/math_threads.h"
#include "plugin/loader.h"
#include "runtime/host_memory.h"
#include "train/mfu_peak.h"

static void plait_itself(plait_doctor *d) {
    char exe[PATH_MAX] = "?";
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 1] = '\0';
    if (n <= 0) exe[0] = '?';
    const char *const *dirs = NULL;
    size_t nd = plait_plugin_dirs(&dirs);
    char where[1024] = "";
    size_t off = 0;
    for (size_t i = 0; i < nd && off + 8 < sizeof where; i++)
        off += (size_t)snprintf(where + off, sizeof where - off, "%s%s", i ? ", " : "", dirs[i]);
    plait_doctor_line(d, "plait", "%s (plugin ABI %d.%d), %s; plugins searched in %s", PLAIT_VERSION, PLAIT_ABI_MAJOR,
                      PLAIT_ABI_MINOR, exe, nd ? where : "(nowhere)");
}

static void cpu_and_blas(plait_doctor *d) {
    plait_cpu_features f;
    plait_cpu_detect(&f);
    char feats[160], blas[256];
    plait_cpu_feature_list(&f, feats, sizeof feats);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    plait_doctor_line(d, "cpu", "%s (%s): %ld cores online, %d this process may use; %s", f.brand[0] ? f.brand : "?",
                      f.vendor[0] ? f.vendor : "?", online, plait_cores_available(), feats);
    plait_blas_describe(blas, sizeof blas);
    plait_doctor_line(d, "blas", "%s", blas);
    const char *core = plait_blas_core_in_use(), *better = plait_blas_pick_core(core, &f);
    if (!core) {
        plait_doctor_line(d, "", "which kernels OpenBLAS runs is unknown (it does not say)");
    } else if (!better) {
        plait_doctor_line(d, "", "%s kernels are the right ones for this CPU's %s", core,
                          f.has[PLAIT_CPU_AVX512] ? "AVX512" : f.has[PLAIT_CPU_AVX2] ? "AVX2" : "instructions");
    } else if (plait_blas_core_set_by_hand()) {
        char fix[256];
        snprintf(fix, sizeof fix, "unset OPENBLAS_CORETYPE (plait then picks %s from cpuid) or set "
                 "OPENBLAS_CORETYPE=%s", better, better);
        plait_doctor_problem(d, "blas", fix, "OPENBLAS_CORETYPE=%s (set by hand) runs %s kernels on a CPU with %s: "
                             "matrix products run slower than they could", getenv("OPENBLAS_CORETYPE"), core,
                             better[0] == 'S' ? "AVX512" : "AVX2");
    } else {
        char fix[128];
        snprintf(fix, sizeof fix, "set OPENBLAS_CORETYPE=%s in the environment", better);
        plait_doctor_problem(d, "blas", fix, "OpenBLAS runs its %s kernels, older than this CPU's (%s would be "
                             "right), and plait could not restart itself with better ones", core, better);
    }
    char why[768];
    if (plait_kernels_onednn_load(why, sizeof why) != 0) plait_doctor_line(d, "onednn", "%s", why);
    if (plait_kernels_set_gemm(NULL, why, sizeof why) != 0) {
        plait_doctor_problem(d, "gemm", "set PLAIT_CPU_GEMM to auto, blas or onednn (with libdnnl2 installed)", "%s",
                             why);
    } else {
        plait_kernels_gemm_describe(why, sizeof why);
        plait_doctor_line(d, "gemm", "%s", why);
    }
    /* oneDNN's own switch, which `auto` and the bf16 products follow
     * (docs/cpu.md): said, since it may hold oneDNN below this CPU */
    const char *held[] = {"ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"};
    for (size_t i = 0; i < sizeof held / sizeof held[0]; i++)
        if (getenv(held[i]))
            plait_doctor_line(d, "", "%s=%s in the environment: oneDNN runs at most that ISA, whatever this CPU has",
                              held[i], getenv(held[i]));
    int bf16_cpu = f.has[PLAIT_CPU_AVX512_BF16] || f.has[PLAIT_CPU_AMX_BF16];
    char what[160];
    if (bf16_cpu && plait_kernels_bf16_native(what, sizeof what, why, sizeof why) == 0)
        plait_doctor_line(d, "precision", "fp32; bf16 runs here (%s, %s)",
                          f.has[PLAIT_CPU_AMX_BF16] ? "AMX_BF16" : "AVX512_BF16", what);
    else if (bf16_cpu)
        plait_doctor_line(d, "precision", "fp32; bf16 would be refused: the CPU has %s but %s",
                          f.has[PLAIT_CPU_AMX_BF16] ? "AMX_BF16" : "AVX512_BF16", why);
    else
        plait_doctor_line(d, "precision", "fp32; bf16 would be refused: the CPU has neither AVX512_BF16 nor AMX_BF16");
}

static void threads(plait_doctor *d) {
    int cores = plait_cores_available();
    int64_t given = d->cfg ? plait_config_int(d->cfg, "run", "threads") : 0;
    if (given > 0)
        plait_doctor_line(d, "threads", "%lld math threads per rank ([run] threads)", (long long)given);
    else
        plait_doctor_line(d, "threads", "[run] threads = 0: the %d cores this process may use, shared by a host's "
                          "ranks (one rank: %d math threads; two: %d each)", cores, cores, cores / 2 > 0 ? cores / 2 : 1);
    const char *env[] = {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "PLAIT_MATH_THREADS"};
    for (size_t i = 0; i < sizeof env / sizeof env[0]; i++)
        if (getenv(env[i]))
            plait_doctor_line(d, "", "%s=%s in the environment (plait sets its BLAS's threads itself; its launcher "
                              "sets these for each rank)", env[i], getenv(env[i]));
}

static void memory(plait_doctor *d) {
    plait_host_memory m;
    plait_host_memory_read(&m);
    char a[32], b[32], c[32];
    plait_doctor_line(d, "memory", "%s total, %s available (MemAvailable)", plait_bytes_text((double)m.total, a, sizeof a),
                      plait_bytes_text((double)m.available, b, sizeof b));
    if (m.cgroup_limit != UINT64_MAX)
        plait_doctor_line(d, "", "cgroup %s: limit %s, %s in use", m.cgroup,
                          plait_bytes_text((double)m.cgroup_limit, a, sizeof a),
                          plait_bytes_text((double)m.cgroup_used, c, sizeof c));
    else
        plait_doctor_line(d, "", "no cgroup memory limit");
    if (m.process_limit != UINT64_MAX)
        plait_doctor_line(d, "", "each process may map at most %s (ulimit -v)",
                          plait_bytes_text((double)m.process_limit, a, sizeof a));
    else
        plait_doctor_line(d, "", "no per-process limit (ulimit -v)");
    plait_doctor_line(d, "", "a layout that does not fit is refused before any rank starts (plait config check)");
}

static void peak(plait_doctor *d) {
    int t = plait_cores_available();
    plait_cpu_peak p;
    plait_cpu_peak_get(t, d->measure_peak ? PLAIT_PEAK_MEASURED : PLAIT_PEAK_CACHED_ONLY, &p);
    if (p.flops <= 0) {
        plait_doctor_line(d, "mfu peak", "not measured yet for one rank of %d threads: the first training run "
                          "measures it (%d tries, about a second) and caches it%s%s; plait doctor --peak measures it "
                          "now", t, PLAIT_CPU_PEAK_TRIES, p.path[0] ? " in " : "", p.path);
        return;
    }
    char date[32] = "?", tries[32] = "", busy[128];
    plait_cpu_peak_busy_text(&p, busy, sizeof busy);
    time_t when = (time_t)p.when;
    struct tm tm;
    if (gmtime_r(&when, &tm)) strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", &tm);
    if (p.tries > 0) snprintf(tries, sizeof tries, ", best of %d tries", p.tries);
    plait_doctor_line(d, "mfu peak", "%.1f GFLOP/s for one rank of %d threads, fp32 (measured %s%s; %s%s%s); every "
                      "run divides by it, plait doctor --peak measures it again", p.flops / 1e9, t,
                      p.from_cache ? date : "now", tries, p.from_cache || p.stored ? "cached in "
                      : "not cached: no writable cache", p.from_cache || p.stored ? p.path : "", busy);
}

void plait_doctor_host(plait_doctor *d) {
    plait_itself(d);
    cpu_and_blas(d);
    threads(d);
    memory(d);
    peak(d);
}
