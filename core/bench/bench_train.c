/*
 * `plait bench train`: steady-state training throughput of a config's layout
 * (no checkpoints, no evaluation): median step time over the slowest rank,
 * tokens/s, MFU against this machine's measured SGEMM peak, the step's split
 * into compute / communication / idle, bytes each rank sent per step by axis,
 * and peak memory per rank; with [run] trace, the trace of the chosen steps
 * (warm-up ones numbered first, from 1), whose summary splits each step
 * from the same clock readings (docs/trace.md).
 */
#include "bench/bench_train.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "launch/bootstrap.h"
#include "comm/comm.h"
#include "cpu/compute_line.h"
#include "device/device.h"
#include "kernels/kernels.h"
#include "runtime/error.h"
#include "runtime/out_file.h"
#include "runtime/memory.h"
#include "train/mfu_peak.h"
#include "train/run.h"
#include "train/run_trace.h"
#include "train/train_loop.h"

#define MB (1024.0 * 1024.0)

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Per step: the step time and its split of the slowest rank (one rank's, so
 * compute + comm + idle = step), then the largest count of any rank for the
 * rest (bytes, memory). */
enum { F_STEP, F_COMPUTE, F_COMM, F_IDLE, F_DP, F_TP, F_PP, F_OPT, F_ACT, F_RSS, F_DEV, N_FIELDS };
enum { N_SPLIT = 4 }; /* step, compute, comm, idle: each rank's own, gathered */

/* The step whose time is the median of the timed steps (rows after `warmup`). */
static int64_t median_step(const double *rows, int64_t warmup, int64_t steps) {
    double *col = malloc(sizeof(double) * (size_t)steps);
    if (!col) return warmup;
    for (int64_t s = 0; s < steps; s++) col[s] = rows[(warmup + s) * N_FIELDS + F_STEP];
    qsort(col, (size_t)steps, sizeof(double), cmp_double);
    double med = col[steps / 2];
    free(col);
    for (int64_t s = 0; s < steps; s++)
        if (rows[(warmup + s) * N_FIELDS + F_STEP] == med) return warmup + s;
    return warmup;
}

const char plait_bench_train_csv_header[] =
    "config,dp,tp,pp,parallel,optim,ranks,threads,ms_per_step,tokens_per_s,mfu,compute_ms,comm_ms,idle_ms,dp_bytes,"
    "tp_bytes,pp_bytes,optim_bytes,peak_rss_mb,activation_bytes,recompute\n";

/* The bench's rows, one a step (warm-up included), and the losses it reports. */
typedef struct bench_rows {
    double *rows; /* a row per step, warm-up included */
    /* the step's vector: N_FIELDS maxima, then every rank's split in its
     * own slot (zeros elsewhere: the maximum gathers them) */
    double *v;
    size_t v_len;
    double first_loss, last_loss;
} bench_rows;

/* Step `s`'s row: every rank's numbers gathered, the slowest rank's step and
 * its own split, the largest of the rest. Collective over the world. */
static plait_status record_step(plait_run *run, const plait_step_result *r, int64_t s, bench_rows *b) {
    int rank = run->world.mesh.world_rank, world = run->world.mesh.world_size;
    double *v = b->v;
    plait_status st = PLAIT_OK;
    if (s == 0) b->first_loss = r->loss;
    b->last_loss = r->loss;
    memset(v, 0, sizeof(double) * b->v_len);
    double *mine = v + N_FIELDS + (size_t)N_SPLIT * (size_t)rank;
    mine[0] = r->t.step_s;
    mine[1] = r->t.compute_s;
    mine[2] = r->t.comm_s;
    mine[3] = r->t.idle_s;
    v[F_DP] = (double)r->t.dp_bytes;
    v[F_TP] = (double)r->t.tp_bytes;
    v[F_PP] = (double)r->t.pp_bytes;
    v[F_OPT] = (double)r->t.optim_bytes;
    v[F_ACT] = (double)plait_model_activation_bytes(run->model.instance);
    v[F_RSS] = (double)plait_peak_rss();
    /* a device's own memory (a GPU's): its allocator's peak since open */
    uint64_t dev_in_use = 0, dev_peak = 0;
    if (plait_device_mem_kind() != PLAIT_MEM_HOST && plait_device_ops_open())
        plait_device_ops_open()->memory_stats(&dev_in_use, &dev_peak);
    v[F_DEV] = (double)dev_peak;
    if (world > 1) st = plait_comm_allreduce(run->world.comm, v, v, b->v_len, PLAIT_F64, PLAIT_MAX, NULL, NULL);
    /* the slowest rank's step and its own split */
    int slow = 0;
    for (int q = 1; q < world; q++)
        if (v[N_FIELDS + N_SPLIT * q] > v[N_FIELDS + N_SPLIT * slow]) slow = q;
    memcpy(v + F_STEP, v + N_FIELDS + N_SPLIT * slow, sizeof(double) * N_SPLIT);
    memcpy(b->rows + s * N_FIELDS, v, sizeof(double) * N_FIELDS);
    return st;
}

/* The timed steps' medians: each field's, then the step time and split of
 * one step, the median one, whose parts add up to it (medians of each part
 * separately would not). */
static void medians(const double *rows, const plait_bench_train_opts *o, double med[N_FIELDS]) {
    double *col = malloc(sizeof(double) * (size_t)o->steps);
    for (int f = 0; col && f < N_FIELDS; f++) {
        for (int64_t s = 0; s < o->steps; s++) col[s] = rows[(o->warmup + s) * N_FIELDS + f];
        qsort(col, (size_t)o->steps, sizeof(double), cmp_double);
        med[f] = col[o->steps / 2];
    }
    free(col);
    memcpy(med + F_STEP, rows + median_step(rows, o->warmup, o->steps) * N_FIELDS + F_STEP, sizeof(double) * N_SPLIT);
}

/* The report's figures, as printed and as the CSV row holds them. */
typedef struct bench_figures {
    double med[N_FIELDS];
    double tokens, tps, fpt, mfu;
    char mfu_text[64];
} bench_figures;

/* The report on `out` (rank 0). */
static void print_report(plait_config *cfg, const plait_run *run, const plait_bench_train_opts *o, const bench_rows *b,
                         const plait_mfu_peak *peak, int device_gemm, const bench_figures *g, FILE *out) {
    int world = run->world.mesh.world_size;
    const double *med = g->med;
    char compute[512];
    plait_compute_line(compute, sizeof compute, plait_kernels_threads(), plait_config_str(cfg, "run", "precision"));
    fprintf(out,
            "# plait bench train %s: %s (recompute %s), dp %d x tp %d x pp %d (%s), optimizer %s, %d rank%s x "
            "%d thread%s\n"
            "# compute %s%s\n"
            "# global batch %lld x %d tokens = %.0f tokens/step; %lld timed steps after %lld warm-up; "
            "loss %.4f -> %.4f\n"
            "# MFU against %.1f GFLOP/s: %d rank%s x %s\n",
            plait_config_path(cfg) ? plait_config_path(cfg) : "", run->model.spec->arch,
            plait_config_str(cfg, "model", "recompute"), run->world.mesh.dp, run->world.mesh.tp, run->world.mesh.pp,
            plait_config_str(cfg, "parallel", "plugin"), plait_config_str(cfg, "optim", "plugin"), world,
            world == 1 ? "" : "s", plait_kernels_threads(), plait_kernels_threads() == 1 ? "" : "s", compute,
            run->model.instance && plait_model_bf16_activations(run->model.instance) ? ", activations bf16" : "",
            (long long)run->work.batch.global_batch, run->model.block_size, g->tokens, (long long)o->steps,
            (long long)o->warmup, b->first_loss, b->last_loss, peak->flops / 1e9, peak->ranks,
            peak->ranks == 1 ? "" : "s", peak->source);
    fprintf(out, "# %9s %10s %6s %10s %9s %8s %9s %9s %9s %9s %9s %11s\n", "ms/step", "tokens/s", "MFU", "compute_ms",
            "comm_ms", "idle_ms", "dp_MB", "tp_MB", "pp_MB", "optim_MB", "act_MB", "peak_rss_MB");
    fprintf(out, "  %9.1f %10.0f %6s %10.1f %9.1f %8.1f %9.2f %9.2f %9.2f %9.2f %9.2f %11.1f\n", 1e3 * med[F_STEP],
            g->tps, g->mfu_text, 1e3 * med[F_COMPUTE], 1e3 * med[F_COMM], 1e3 * med[F_IDLE], med[F_DP] / MB,
            med[F_TP] / MB, med[F_PP] / MB, med[F_OPT] / MB, med[F_ACT] / MB, med[F_RSS] / MB);
    if (isnan(g->mfu) && peak->flops > 0 && g->tps * g->fpt > peak->flops)
        fprintf(out, "# MFU above 100%%: the step computed faster than the peak it is divided by, so that peak is "
                     "too low (measured while the machine was busy, or [run] mfu_peak set too low); `plait "
                     "doctor --peak` measures it again on a quiet machine and replaces the cached figure\n");
    if (device_gemm && plait_device_info_open()) {
        char sheet[160] = "no datasheet peak for this precision on this device";
        if (peak->datasheet_flops > 0) {
            char mfu_sheet[64];
            plait_mfu_text(g->tps * g->fpt, peak->datasheet_flops, mfu_sheet, sizeof mfu_sheet);
            snprintf(sheet, sizeof sheet, "MFU %s against the datasheet's %.1f TFLOP/s", mfu_sheet,
                     peak->datasheet_flops / 1e12);
        }
        fprintf(out,
                "# device %s: peak device memory %.1f MiB (max over ranks; the allocator's peak during the "
                "steps); %s (the MFU column is against the measured GEMM rate)\n",
                plait_device_info_open()->name, med[F_DEV] / MB, sheet);
    }
    fprintf(out, "# times: the median step of the slowest rank, split into compute + comm + idle = ms/step; "
                 "bytes: payload each rank sent per step (max over ranks); act: activation memory (saved activations, "
                 "backward scratch, recompute buffers), max over ranks; peak RSS: max over ranks\n");
}

/* The report's row appended to --csv (rank 0), the header first into a new
 * file. */
static plait_status append_csv(plait_config *cfg, const plait_run *run, const char *csv, const bench_figures *g) {
    const double *med = g->med;
    const char *header = plait_bench_train_csv_header;
    FILE *f = NULL;
    plait_status st = plait_out_check_own(csv, header, "--csv");
    if (st == PLAIT_OK) st = plait_out_fopen(csv, "a", &f);
    if (!f) return st;
    if (ftell(f) == 0) fputs(header, f);
    fprintf(f, "%s,%d,%d,%d,%s,%s,%d,%d,%.3f,%.1f,%.4f,%.3f,%.3f,%.3f,%.0f,%.0f,%.0f,%.0f,%.1f,%.0f,%s\n",
            plait_config_path(cfg) ? plait_config_path(cfg) : "", run->world.mesh.dp, run->world.mesh.tp,
            run->world.mesh.pp, plait_config_str(cfg, "parallel", "plugin"), plait_config_str(cfg, "optim", "plugin"),
            run->world.mesh.world_size, plait_kernels_threads(), 1e3 * med[F_STEP], g->tps, g->mfu,
            1e3 * med[F_COMPUTE], 1e3 * med[F_COMM], 1e3 * med[F_IDLE], med[F_DP], med[F_TP], med[F_PP], med[F_OPT],
            med[F_RSS] / MB, med[F_ACT], plait_config_str(cfg, "model", "recompute"));
    if (fclose(f) != 0) st = plait_set_error(PLAIT_ERR_SYSTEM, "%s: cannot append the CSV row", csv);
    return st;
}

/* Rank 0's report of the timed steps, and its CSV row. */
static plait_status report(plait_config *cfg, const plait_run *run, const plait_bench_train_opts *o,
                           const bench_rows *b, const plait_mfu_peak *peak, int device_gemm, FILE *out) {
    bench_figures g = {{0}};
    medians(b->rows, o, g.med);
    g.tokens = (double)run->work.batch.global_batch * run->model.block_size;
    g.tps = g.tokens / g.med[F_STEP];
    g.fpt = plait_run_flops_per_token(run);
    g.mfu = plait_mfu_text(g.tps * g.fpt, peak->flops, g.mfu_text, sizeof g.mfu_text);
    print_report(cfg, run, o, b, peak, device_gemm, &g, out);
    return o->csv ? append_csv(cfg, run, o->csv, &g) : PLAIT_OK;
}

/* [run] trace over the bench's steps (warm-up first, numbered from 1):
 * the recorder opened and the clocks measured (collective), into the
 * run's out_dir as `plait train` writes it. */
static plait_status trace_start(plait_config *cfg, plait_run *run, int64_t total, char *out_dir, size_t cap) {
    plait_train_out_dir(cfg, out_dir, cap);
    plait_status st = plait_run_trace_range(cfg, 1, total, &run->trace_first, &run->trace_last);
    if (st != PLAIT_OK || run->trace_first <= 0) return st;
    if (mkdir(out_dir, 0755) != 0 && errno != EEXIST)
        return plait_set_error(PLAIT_ERR_SYSTEM, "[run] trace: cannot create [run] out_dir %s for the trace: %s",
                               out_dir, strerror(errno));
    return plait_run_trace_start(run, out_dir);
}

plait_status plait_bench_train_run(plait_config *cfg, const plait_bench_train_opts *o, FILE *out) {
    plait_run *run = NULL;
    plait_status st = plait_run_open(cfg, NULL, &run);
    if (st != PLAIT_OK) return st;
    int rank = run->world.mesh.world_rank, world = run->world.mesh.world_size;
    /* the peak (train/mfu_peak.h: one rank's threads, measured by rank 0
     * while the others wait, cached per machine) */
    plait_mfu_peak peak = {0};
    /* a GPU's rate is measured after the timed steps instead, so its
     * buffers never count in the peak device memory reported below */
    int device_gemm = plait_device_mem_kind() != PLAIT_MEM_HOST;
    if (rank == 0 && !device_gemm)
        plait_mfu_peak_get(cfg, plait_kernels_threads(), plait_job_local_size(run->world.job), world, &peak);
    if (world > 1) st = plait_comm_barrier(run->world.comm, NULL, NULL);
    int64_t total = o->warmup + o->steps;
    char out_dir[4096];
    if (st == PLAIT_OK) st = trace_start(cfg, run, total, out_dir, sizeof out_dir);
    bench_rows b = {.v_len = N_FIELDS + (size_t)N_SPLIT * (size_t)world, .first_loss = NAN, .last_loss = NAN};
    b.rows = calloc((size_t)total * N_FIELDS, sizeof(double));
    b.v = calloc(b.v_len, sizeof(double));
    if (!b.rows || !b.v) st = plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    run->steps = run->step + total;
    /* the step being worked on, from 1; past the steps: the bench's end */
    int64_t at_step = 0;
    for (int64_t s = 0; st == PLAIT_OK && s < total; s++) {
        plait_step_result r;
        at_step = s + 1;
        plait_run_trace_step_begin(run, at_step);
        st = plait_run_step(run, &r);
        if (st != PLAIT_OK) break;
        st = record_step(run, &r, s, &b);
        if (st == PLAIT_OK) st = plait_run_trace_step_end(run, at_step, out_dir);
        /* as `plait train` checks each step (train/run.h): --csv is a path */
        char when[64];
        snprintf(when, sizeof when, "step %lld: the step's calls", (long long)(s + 1));
        if (st == PLAIT_OK) st = plait_run_check_process(run, when);
    }
    free(b.v);
    if (st == PLAIT_OK && device_gemm) {
        if (rank == 0)
            plait_mfu_peak_get(cfg, plait_kernels_threads(), plait_job_local_size(run->world.job), world, &peak);
        if (world > 1) st = plait_comm_barrier(run->world.comm, NULL, NULL);
        if (st == PLAIT_OK) st = plait_run_check_process(run, "the bench's end: the calls measuring the device's peak");
    }
    if (st == PLAIT_OK && rank == 0) st = report(cfg, run, o, &b, &peak, device_gemm, out);
    free(b.rows);
    /* as `plait train` ends a failing rank: its peers learn why */
    if (st != PLAIT_OK) {
        char at[32] = "the bench's start";
        if (at_step) snprintf(at, sizeof at, "step %lld", (long long)at_step);
        return plait_run_fail(run, st, at, "bench train");
    }
    plait_run_close(run);
    return st;
}
