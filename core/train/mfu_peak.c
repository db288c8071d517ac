#include "train/mfu_peak.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cpu/blas.h"
#include "cpu/cpu_features.h"
#include "device/device.h"
#include "kernels/kernels.h"
#include "model/sgemm_peak.h"
#include "runtime/clock.h"
#include "runtime/host_identity.h"
#include "runtime/out_file.h"
#include "runtime/regular_file.h"

static const char *precision_name(void) {
    switch (plait_kernels_precision()) {
    case PLAIT_KERNELS_BF16: return "bf16";
    case PLAIT_KERNELS_BF16_EMULATED: return "bf16-emulated";
    default: return "fp32";
    }
}

/* This process's CPU time, all its threads, in seconds. */
static double cpu_seconds(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0) return 0;
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cache_path(char *buf, size_t len) {
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n;
    if (xdg && *xdg)
        n = snprintf(buf, len, "%s/plait/peak.tsv", xdg);
    else if (home && *home)
        n = snprintf(buf, len, "%s/.cache/plait/peak.tsv", home);
    else
        return -1;
    return n > 0 && (size_t)n < len ? 0 : -1;
}

double plait_mfu_peak_cache_lookup(const char *path, const char *key, long long *when, int *tries, double *share) {
    FILE *f = NULL;
    /* a cache that is not a regular file (a FIFO would block) is no cache */
    if (plait_fopen_regular(path, "cache", PLAIT_ERR_SYSTEM, &f) != PLAIT_OK) return 0;
    char line[1024];
    double found = 0;
    size_t klen = strlen(key);
    while (fgets(line, sizeof line, f)) {
        double g, sh = 1;
        long long t;
        int n = 0;
        /* "inf" (or 1e999) reads as a rate too: a peak of infinity would
         * make every MFU 0%, so only a finite rate is one */
        if (strncmp(line, key, klen) == 0 && line[klen] == '\t' &&
            sscanf(line + klen + 1, "%lf\t%lld\t%d\t%lf", &g, &t, &n, &sh) >= 2 && g > 0 && isfinite(g)) {
            found = g;
            *when = t;
            *tries = n;
            *share = sh > 0 && sh <= 1 ? sh : 1;
        }
    }
    fclose(f);
    return found;
}

static int make_parent(const char *path) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(dir, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    return 0;
}

/* Other keys' lines kept, this key's replaced; written to a temporary file
 * and renamed, so concurrent runs never see a half-written cache. */
static int cache_store(const char *path, const char *key, double gflops, int tries, double share) {
    if (make_parent(path) != 0) return -1;
    /* a name no one else has (O_EXCL, never a link planted at a name
     * known in advance: runtime/out_file.h) */
    char tmp[4200];
    FILE *out = NULL;
    if (plait_out_fopen_temp(path, tmp, sizeof tmp, &out) != PLAIT_OK) return -1;
    FILE *in = NULL;
    if (plait_fopen_regular(path, "cache", PLAIT_ERR_SYSTEM, &in) != PLAIT_OK) in = NULL;
    size_t klen = strlen(key);
    if (in) {
        char line[1024];
        while (fgets(line, sizeof line, in))
            if (!(strncmp(line, key, klen) == 0 && line[klen] == '\t')) fputs(line, out);
        fclose(in);
    }
    fprintf(out, "%s\t%.3f\t%lld\t%d\t%.2f\n", key, gflops, (long long)time(NULL), tries, share);
    int bad = ferror(out);
    if (fclose(out) != 0 || bad || rename(tmp, path) != 0) {
        remove(tmp);
        return -1;
    }
    return 0;
}

/* The open device's GEMM rate in FLOP/s, through its own kernels and memory:
 * square products from 512 up to 4096 (doubling while one takes under
 * 5 ms, so a slow device is not kept for seconds), repeated for ~0.2 s, the
 * best call counted; 0 when the device cannot allocate or synchronize. */
static double device_gemm_rate(void) {
    const plait_device_ops *ops = plait_device_ops_open();
    const plait_kernels *k = plait_device_kernels();
    const int64_t max_n = 4096;
    size_t bytes = (size_t)max_n * max_n * sizeof(float);
    float *a = plait_device_alloc(bytes, "mfu-peak"), *b = plait_device_alloc(bytes, "mfu-peak"),
          *c = plait_device_alloc(bytes, "mfu-peak");
    double best = 0;
    if (ops && k && a && b && c && ops->fill_zero(a, bytes) == PLAIT_OK && ops->fill_zero(b, bytes) == PLAIT_OK &&
        ops->synchronize() == PLAIT_OK) {
        int64_t n = 512;
        double spent = 0;
        for (int calls = 0; spent < 0.2 && calls < 1000; calls++) {
            double t0 = plait_clock_now();
            k->sgemm(0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
            if (ops->synchronize() != PLAIT_OK) break;
            double dt = plait_clock_now() - t0, rate = dt > 0 ? 2.0 * (double)n * n * n / dt : 0;
            spent += dt;
            if (rate > best) best = rate;
            if (dt < 0.005 && n < max_n) n *= 2, best = 0; /* too small to measure well: the rate of larger products */
        }
    }
    plait_device_free(a);
    plait_device_free(b);
    plait_device_free(c);
    return best;
}

/* A device that is not host memory (a GPU): its measured GEMM rate, the
 * datasheet's beside it; every rank is assumed to have a device of its own
 * (launch gives one per rank under nccl; ranks sharing one over a host
 * transport make the job's peak too high and MFU too low). */
static int device_peak(const plait_config *cfg, int world, plait_mfu_peak *out) {
    const plait_device_info *info = plait_device_info_open();
    if (!info || plait_device_mem_kind() == PLAIT_MEM_HOST) return 0;
    plait_precision pr = cfg ? plait_device_precision(cfg) : PLAIT_PRECISION_FP32;
    const char *pr_name = pr == PLAIT_PRECISION_BF16 ? "bf16" : pr == PLAIT_PRECISION_TF32 ? "tf32" : "fp32";
    double sheet = pr == PLAIT_PRECISION_BF16 ? info->peak_flops_bf16 : pr == PLAIT_PRECISION_TF32 ? info->peak_flops_tf32 : 0;
    double rate = device_gemm_rate();
    out->ranks = world;
    out->rank_flops = rate;
    out->flops = rate * world;
    out->datasheet_flops = sheet * world;
    char sheet_text[96] = "no datasheet peak for this precision";
    if (sheet > 0) snprintf(sheet_text, sizeof sheet_text, "datasheet %.1f TFLOP/s", sheet / 1e12);
    snprintf(out->source, sizeof out->source,
             "the GEMM rate of %s measured now through its kernels in %s, %.1f GFLOP/s (%s)", info->name, pr_name,
             rate / 1e9, sheet_text);
    return 1;
}

void plait_mfu_peak_get(const plait_config *cfg, int threads, int local_ranks, int world, plait_mfu_peak *out) {
    memset(out, 0, sizeof *out);
    if (threads < 1) threads = 1;
    if (local_ranks < 1) local_ranks = 1;
    if (world < local_ranks) world = local_ranks;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int fit = cores > 0 ? (int)(cores / threads) : local_ranks;
    if (fit < 1) fit = 1;
    if (fit > local_ranks) fit = local_ranks;
    out->ranks = fit * (world / local_ranks);

    double given = cfg ? plait_config_float(cfg, "run", "mfu_peak") : 0;
    char what[128];
    snprintf(what, sizeof what, "%d thread%s, %s", threads, threads == 1 ? "" : "s", precision_name());
    if (given > 0) {
        /* the key is the job's peak, as it always was */
        out->flops = given * 1e9;
        out->rank_flops = out->flops / out->ranks;
        snprintf(out->source, sizeof out->source, "%.1f GFLOP/s from [run] mfu_peak", given);
        return;
    }
    if (device_peak(cfg, world, out)) return;
    plait_cpu_peak cpu;
    plait_cpu_peak_get(threads, PLAIT_PEAK_CACHED_OR_MEASURED, &cpu);
    char date[32] = "?";
    time_t t = (time_t)cpu.when;
    struct tm tm;
    if (gmtime_r(&t, &tm)) strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", &tm);
    char tries[32] = "", busy[128];
    if (cpu.tries > 0) snprintf(tries, sizeof tries, ", best of %d tries", cpu.tries);
    plait_cpu_peak_busy_text(&cpu, busy, sizeof busy);
    if (cpu.from_cache)
        snprintf(out->source, sizeof out->source,
                 "the GEMM rate of one rank's %s on this machine, %.1f GFLOP/s (measured %s%s, cached in %s)", what,
                 cpu.flops / 1e9, date, tries, cpu.path);
    else
        snprintf(out->source, sizeof out->source,
                 "the GEMM rate of one rank's %s on this machine, %.1f GFLOP/s (measured now%s, %s%s%s)", what,
                 cpu.flops / 1e9, tries, cpu.stored ? "cached in " : "not cached: ",
                 cpu.stored ? cpu.path : "no writable cache", busy);
    out->rank_flops = cpu.flops;
    out->flops = out->rank_flops * out->ranks;
}

/* "X (how it was chosen)" -> "X" */
static void cut_how(char *s) {
    char *paren = strchr(s, '(');
    if (paren && paren > s) paren[-1] = '\0';
}

void plait_cpu_peak_get(int threads, plait_peak_how how, plait_cpu_peak *out) {
    memset(out, 0, sizeof *out);
    if (threads < 1) threads = 1;
    plait_cpu_features f;
    plait_cpu_detect(&f);
    char blas[256], machine[400];
    plait_blas_describe(blas, sizeof blas);
    /* "OpenBLAS 0.3.21, Zen kernels (...)": the kernels without how they were chosen */
    cut_how(blas);
    if (plait_kernels_gemm() == PLAIT_GEMM_ONEDNN) {
        /* oneDNN's products have a rate of their own: ", products on oneDNN
         * 2.6.3, avx2 ISA" after the BLAS (a BLAS run's key is unchanged) */
        char gemm[160];
        plait_kernels_gemm_describe(gemm, sizeof gemm);
        cut_how(gemm);
        size_t n = strlen(blas);
        snprintf(blas + n, sizeof blas - n, ", %s", gemm);
    }
    if (plait_kernels_precision() == PLAIT_KERNELS_BF16) {
        /* bf16 products have the rate of the library that runs them */
        char lib[160];
        plait_kernels_bf16_describe(lib, sizeof lib);
        size_t n = strlen(blas);
        snprintf(blas + n, sizeof blas - n, ", %s", lib);
    }
    plait_machine_identity(machine, sizeof machine);
    snprintf(out->key, sizeof out->key, "%s|%s|%ld cores|%s|%dt|%s", machine, f.brand[0] ? f.brand : f.vendor,
             sysconf(_SC_NPROCESSORS_ONLN), blas, threads, precision_name());
    int have_path = cache_path(out->path, sizeof out->path) == 0;
    if (!have_path) out->path[0] = '\0';
    /* A cached rate is used as it is, without measuring again: the figure
     * MFU is divided by stays the same from run to run on one machine. */
    double cached_share = 1;
    double cached = have_path && how != PLAIT_PEAK_MEASURED
                        ? plait_mfu_peak_cache_lookup(out->path, out->key, &out->when, &out->tries, &cached_share)
                        : 0;
    if (cached > 0 && (cached_share >= PLAIT_CPU_PEAK_QUIET || how == PLAIT_PEAK_CACHED_ONLY)) {
        out->flops = cached * 1e9;
        out->share = cached_share;
        out->from_cache = 1;
        return;
    }
    if (how == PLAIT_PEAK_CACHED_ONLY) return;
    /* Several short tries, the best kept: one try can land on a moment
     * when something else holds the cores. Each try's CPU time says
     * whether it had them: threads x wall when they were its own. */
    double best = 0, share = 0;
    for (int i = 0; i < PLAIT_CPU_PEAK_TRIES; i++) {
        if (i) plait_clock_sleep(0.05);
        double c0 = cpu_seconds(), t0 = plait_clock_now();
        double r = plait_sgemm_peak(threads, 0.1);
        double wall = plait_clock_now() - t0, sh = wall > 0 ? (cpu_seconds() - c0) / (wall * threads) : 0;
        if (r > best) {
            best = r;
            share = sh > 1 ? 1 : sh;
        }
    }
    /* measured again over a busy cached figure: the higher of the two (a
     * busy measurement can only fall short of the cores' rate); busy or
     * quiet as this measurement was */
    if (cached * 1e9 > best) best = cached * 1e9;
    /* the figure as the cache keeps it (GFLOP/s to a thousandth), read back
     * as the next run will read it: this run and the next divide by the same
     * double, not by two that print differently at the last digit */
    char kept[64];
    snprintf(kept, sizeof kept, "%.3f", best / 1e9);
    best = strtod(kept, NULL) * 1e9;
    /* the share too, to the hundredth the cache keeps: busy or quiet is
     * decided on the value the next run reads (0.796 is kept as 0.80, which
     * that run takes as quiet, so this one says quiet as well) */
    snprintf(kept, sizeof kept, "%.2f", share);
    share = strtod(kept, NULL);
    out->flops = best;
    out->share = share;
    out->tries = PLAIT_CPU_PEAK_TRIES;
    out->when = (long long)time(NULL);
    out->stored = have_path && best > 0 && cache_store(out->path, out->key, best / 1e9, out->tries, share) == 0;
}

void plait_cpu_peak_busy_text(const plait_cpu_peak *p, char *buf, size_t len) {
    if (p->flops > 0 && p->share < PLAIT_CPU_PEAK_QUIET)
        snprintf(buf, len,
                 "; the cores were busy (the measurement had %.0f%% of its threads' time), so the next run measures "
                 "again",
                 100 * p->share);
    else if (len)
        buf[0] = '\0';
}

double plait_mfu_text(double achieved, double peak, char *buf, size_t len) {
    if (!(peak > 0) || !(achieved >= 0)) {
        snprintf(buf, len, "n/a");
        return NAN;
    }
    double mfu = achieved / peak;
    if (mfu > 1.0) {
        snprintf(buf, len, "error: %.0f%% of the peak", 100 * mfu);
        return NAN;
    }
    snprintf(buf, len, "%.1f%%", 100 * mfu);
    return mfu;
}
