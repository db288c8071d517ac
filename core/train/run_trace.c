/*
 * A traced run (run_trace.h): the steps of [run] trace, the clocks'
 * offsets, and the files at the end of the traced steps.
 */
#include "train/run_trace.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm/comm.h"
#include "runtime/clock.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "runtime/out_file.h"
#include "runtime/trace.h"
#include "runtime/trace_merge.h"
#include "runtime/trace_nvtx.h"

/* Spans a rank holds (about 190 bytes each): a few steps of a deep
 * pipeline; past it spans are counted as dropped, and the count written. */
#define TRACE_CAPACITY 32768
/* Ping-pong rounds of the clock exchange; the shortest round trip wins. */
#define CLOCK_ROUNDS 8
/* A tag of the world communicator no other exchange uses before step 1. */
#define TAG_CLOCK 0x7ff00000u

static int rank_written;
/* The run's directory and this rank's file, for the failure path's note. */
static char trace_out_dir[4200], rank_path[4300];

static plait_status bad_range(const plait_config *cfg, const char *text, int64_t from, int64_t steps,
                              const char *why) {
    const char *where = "?";
    plait_config_origin(cfg, "run", "trace", &where);
    if (steps <= 0) /* the steps not known yet: the value's form alone */
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s: key 'trace' in [run]: '%s' %s (allowed: N or FIRST:LAST, steps numbered from 1 "
                               "as metrics.csv numbers them; empty = off)",
                               where, text, why);
    return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                           "%s: key 'trace' in [run]: '%s' %s; this run trains steps %lld to %lld (allowed: N or "
                           "FIRST:LAST within them, numbered from 1 as metrics.csv numbers steps; empty = off)",
                           where, text, why, (long long)from, (long long)steps);
}

static int parse_step(const char *s, char **end, int64_t *v) {
    if (*s < '0' || *s > '9') return 0;
    errno = 0;
    long long x = strtoll(s, end, 10);
    if (errno != 0) return 0;
    *v = x;
    return 1;
}

plait_status plait_run_trace_range(const plait_config *cfg, int64_t from, int64_t steps, int64_t *first,
                                   int64_t *last) {
    *first = *last = 0;
    const char *text = plait_config_str(cfg, "run", "trace");
    if (!text || !*text) return PLAIT_OK;
    char *end;
    int64_t a, b;
    if (!parse_step(text, &end, &a)) return bad_range(cfg, text, from, steps, "is not a step number or range");
    b = a;
    if (*end == ':' && !parse_step(end + 1, &end, &b))
        return bad_range(cfg, text, from, steps, "is not a step number or range");
    if (*end) return bad_range(cfg, text, from, steps, "is not a step number or range");
    if (a < 1 || b < a) return bad_range(cfg, text, from, steps, "is not a range of steps from 1, first to last");
    if (steps > 0 && (a < from || b > steps))
        return bad_range(cfg, text, from, steps, "lies outside the steps this run trains");
    *first = a;
    *last = b;
    return PLAIT_OK;
}

/* <out_dir>/trace, a directory this rank can write into. */
static plait_status trace_dir(const char *out_dir, char *dir, size_t cap) {
    snprintf(dir, cap, "%s/trace", out_dir);
    struct stat sb;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return plait_set_error(PLAIT_ERR_SYSTEM, "[run] trace: cannot create %s for the ranks' traces: %s", dir,
                               strerror(errno));
    if (lstat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "[run] trace: %s is in the way of the ranks' traces (not a directory): remove it or "
                               "choose another [run] out_dir",
                               dir);
    /* written at the traced steps' end: found unwritable now, not then */
    char tmp[4400];
    int fd;
    char probe[4300];
    snprintf(probe, sizeof probe, "%s/probe", dir);
    plait_status st = plait_out_temp(probe, tmp, sizeof tmp, &fd);
    if (st != PLAIT_OK) return plait_wrap_error(st, "[run] trace: cannot write the ranks' traces in %s", dir);
    close(fd);
    unlink(tmp);
    return PLAIT_OK;
}

/* Cristian's algorithm against rank 0: rank r sends, rank 0 answers with
 * its clock T; with the round trip [t0, t1] on r's clock, rank 0's clock
 * is T - (t0 + t1) / 2 ahead, within half the round trip. Rank 0 serves
 * the ranks one after another. */
static plait_status measure_clock(plait_run *run) {
    plait_comm *world = run->world.comm;
    int me = run->world.mesh.world_rank, n = run->world.mesh.world_size;
    if (n == 1 || !world) {
        plait_trace_set_clock(0, 0, 0);
        return PLAIT_OK;
    }
    plait_status st = PLAIT_OK;
    if (me == 0) {
        for (int r = 1; st == PLAIT_OK && r < n; r++)
            for (int k = 0; st == PLAIT_OK && k < CLOCK_ROUNDS; k++) {
                int64_t ping = 0;
                st = plait_comm_recv(world, &ping, 1, PLAIT_I64, r, TAG_CLOCK, NULL);
                int64_t now = (int64_t)plait_clock_now_ns();
                if (st == PLAIT_OK) st = plait_comm_send(world, &now, 1, PLAIT_I64, r, TAG_CLOCK, NULL);
            }
        plait_trace_set_clock(0, 0, CLOCK_ROUNDS);
        return st;
    }
    int64_t best_rtt = INT64_MAX, offset = 0;
    for (int k = 0; st == PLAIT_OK && k < CLOCK_ROUNDS; k++) {
        int64_t ping = k, theirs = 0;
        int64_t t0 = (int64_t)plait_clock_now_ns();
        st = plait_comm_send(world, &ping, 1, PLAIT_I64, 0, TAG_CLOCK, NULL);
        if (st == PLAIT_OK) st = plait_comm_recv(world, &theirs, 1, PLAIT_I64, 0, TAG_CLOCK, NULL);
        int64_t t1 = (int64_t)plait_clock_now_ns();
        if (st == PLAIT_OK && t1 - t0 < best_rtt) {
            best_rtt = t1 - t0;
            offset = theirs - t0 - (t1 - t0) / 2;
        }
    }
    if (st == PLAIT_OK) plait_trace_set_clock(offset, best_rtt / 2, CLOCK_ROUNDS);
    return st;
}

plait_status plait_run_trace_start(plait_run *run, const char *out_dir) {
    if (run->trace_first <= 0) return PLAIT_OK;
    char dir[4200], path[4300];
    plait_status st = trace_dir(out_dir, dir, sizeof dir);
    snprintf(path, sizeof path, "%s/rank-%05d.trace", dir, run->world.mesh.world_rank);
    if (st == PLAIT_OK) st = plait_out_check_own(path, "plait-trace", "the rank's trace");
    if (st == PLAIT_OK && run->world.mesh.world_rank == 0) {
        char merged[4200];
        snprintf(merged, sizeof merged, "%s/trace.json", out_dir);
        st = plait_out_check_own(merged, PLAIT_TRACE_JSON_FIRST_LINE, "the merged trace");
    }
    if (st == PLAIT_OK) st = plait_trace_open(TRACE_CAPACITY, run->world.mesh.world_rank, path);
    if (st == PLAIT_OK) (void)plait_trace_nvtx_load(); /* the spans as NVTX ranges too, where NVTX is */
    rank_written = 0;
    snprintf(trace_out_dir, sizeof trace_out_dir, "%s", out_dir);
    snprintf(rank_path, sizeof rank_path, "%s", path);
    if (st == PLAIT_OK) st = measure_clock(run);
    return st;
}

void plait_run_trace_step_begin(plait_run *run, int64_t step) {
    if (run->trace_first > 0) plait_trace_set_recording(step >= run->trace_first && step <= run->trace_last);
}

plait_status plait_run_trace_step_end(plait_run *run, int64_t step, const char *out_dir) {
    if (run->trace_first <= 0 || step != run->trace_last) return PLAIT_OK;
    plait_trace_set_recording(0);
    plait_status st = plait_trace_write();
    rank_written = 1;
    uint64_t dropped = plait_trace_dropped();
    /* every rank's file is in place before rank 0 reads them */
    plait_coll_opts opts = {.struct_size = sizeof opts, .label = "trace files written"};
    if (st == PLAIT_OK && run->world.comm && run->world.mesh.world_size > 1)
        st = plait_comm_barrier(run->world.comm, &opts, NULL);
    if (st != PLAIT_OK || run->world.mesh.world_rank != 0) return st;
    int ranks = 0;
    st = plait_trace_merge(out_dir, &ranks);
    if (st != PLAIT_OK) return plait_wrap_error(st, "[run] trace");
    printf("trace of steps %lld to %lld: %s/trace.json (%d rank%s%s; open it in https://ui.perfetto.dev, or "
           "`plait trace summary`)\n",
           (long long)run->trace_first, (long long)run->trace_last, out_dir, ranks, ranks == 1 ? "" : "s",
           dropped ? ", rank 0 dropped spans: its buffer was full" : "");
    fflush(stdout);
    return PLAIT_OK;
}

void plait_run_trace_flush(void) {
    if (!plait_trace_is_open() || rank_written) return;
    plait_trace_set_recording(0);
    rank_written = 1;
    /* the failure's own message stays the thread's error */
    char failure[1024];
    snprintf(failure, sizeof failure, "%s", plait_last_error());
    if (plait_trace_write() == PLAIT_OK)
        PLAIT_WARN("trace",
                   "this rank stopped inside the traced steps: the %zu spans it recorded up to the failure are in "
                   "%s; `plait trace merge %s` joins the ranks' files into %s/trace.json",
                   plait_trace_count(), rank_path, trace_out_dir, trace_out_dir);
    else
        PLAIT_WARN("trace", "this rank stopped inside the traced steps, and its spans could not be written: %s",
                   plait_last_error());
    plait_set_error(PLAIT_ERR_INTERNAL, "%s", failure);
}
