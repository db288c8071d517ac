/*
 * Fuzz target for the text tables plait reads back from files a user can
 * edit, copy between machines or find cut short:
 *   - `plait plan --comm-csv`'s `plait bench comm --csv` table
 *     (plait_cluster_fit_comm, over a small GPU cluster);
 *   - the CSV `plait bench sweep --csv` continues from
 *     (plait_sweep_load_csv, with three layouts whose names rows can match);
 *   - the measured-peak cache peak.tsv (plait_mfu_peak_cache_lookup, for a
 *     fixed key and for the file's own first key);
 *   - the metrics.csv a resumed run trims and appends to
 *     (plait_metrics_open with append, then a row added).
 * The bytes are written to a scratch file and read by each in turn (the
 * metrics file last: a resume rewrites it). The first byte also picks the
 * resumed step (its top seven bits) and whether the row appended to
 * metrics.csv brings a column the file lacks (bit 0). Whatever the bytes, a
 * reader returns a status with a message and never crashes, leaks or reads
 * out of bounds (ASan/UBSan); a fit that succeeds gives a finite, positive
 * bandwidth, a cache figure is finite, a sweep row holds at most
 * PLAIT_SWEEP_MAX_RUNS runs.
 *
 * Built as `fuzz_tables` (PLAIT_FUZZ=ON) and as the ctest
 * `test_fuzz_tables_corpus` (replay_main.c over tests/fuzz/corpus/tables).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_sweep.h"
#include "cost/cluster.h"
#include "cost/layouts.h"
#include "fuzz_scratch.h"
#include "runtime/error.h"
#include "train/metrics.h"
#include "train/mfu_peak.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char path[FUZZ_PATH_MAX];
static plait_cluster cluster;

/* The scratch file and the cluster, made once: neither is what is fuzzed. */
static void setup(void) {
    if (path[0]) return;
    snprintf(path, sizeof path, "%s/table", fuzz_scratch("plait-fuzz-tables"));
    if (plait_cluster_parse("fuzz.ini",
                            "[cluster]\nnodes = 1\n[node]\nkind = gpu\ngpus = 8\nmemory = 80G\npeak_gflops = 19500\n"
                            "[intra]\nkind = nvlink\nbandwidth = 300\nlatency_us = 3\n[inter]\nkind = none\n",
                            &cluster) != PLAIT_OK) {
        fprintf(stderr, "fuzz_tables: the cluster did not parse: %s\n", plait_last_error());
        abort();
    }
}

static void comm_table(void) {
    plait_cluster c = cluster;
    plait_status st = plait_cluster_fit_comm(&c, path);
    if (st == PLAIT_OK && !(isfinite(c.intra.bandwidth) && c.intra.bandwidth > 0 && isfinite(c.intra.latency) &&
                            c.intra.latency >= 0))
        abort();
    fuzz_refused(st);
}

static void sweep_csv(void) {
    /* "dp2 tp1 pp1 mb1 adam", "dp1 tp2 pp1 mb2 zero1",
     * "dp1 tp1 pp2 1f1b v2 mb1 adam b25M shm" */
    static const plait_cost_layout layouts[] = {
        {.dp = 2, .tp = 1, .pp = 1, .chunks = 1, .optim = "adam", .micro_batch = 1, .comm = "tcp"},
        {.dp = 1, .tp = 2, .pp = 1, .chunks = 1, .optim = "zero1", .micro_batch = 2, .comm = "tcp"},
        {.dp = 1, .tp = 1, .pp = 2, .schedule = "1f1b", .chunks = 2, .optim = "adam", .micro_batch = 1,
         .bucket_mb = 25, .comm = "shm"},
    };
    enum { N = sizeof layouts / sizeof layouts[0] };
    static plait_sweep_row rows[N];
    memset(rows, 0, sizeof rows);
    for (int i = 0; i < N; i++) {
        rows[i].predicted.layout = layouts[i];
        rows[i].predicted.valid = rows[i].predicted.fits = 1;
    }
    fuzz_refused(plait_sweep_load_csv(path, rows, N));
    for (int i = 0; i < N; i++)
        if (rows[i].n_runs < 0 || rows[i].n_runs > PLAIT_SWEEP_MAX_RUNS || (rows[i].n_runs && rows[i].state != 1))
            abort();
}

static void peak_cache(const uint8_t *data, size_t size) {
    char key[1024] = "host|CPU|2 cores|OpenBLAS|1t|fp32";
    for (int pass = 0; pass < 2; pass++) {
        if (pass) { /* the first line's first field, so that some line matches */
            size_t k = 0;
            while (k < size && k + 1 < sizeof key && data[k] != '\t' && data[k] != '\n' && data[k] != '\0') k++;
            memcpy(key, data, k);
            key[k] = '\0';
        }
        long long when = 0;
        int tries = 0;
        double share = 1;
        double g = plait_mfu_peak_cache_lookup(path, key, &when, &tries, &share);
        if (!(isfinite(g) && g >= 0) || (g > 0 && !(share > 0 && share <= 1))) abort();
        plait_clear_error();
    }
}

static void metrics_csv(const uint8_t *data, size_t size) {
    int64_t resumed_step = size ? data[0] >> 1 : 0;
    int new_column = size ? data[0] & 1 : 0;
    plait_metrics m;
    plait_status st = plait_metrics_open(&m, path, 1, resumed_step);
    if (st == PLAIT_OK) {
        int step = plait_metrics_column(&m, "step");
        plait_metrics_column(&m, "loss");
        if (new_column) plait_metrics_column(&m, "tokens_per_s");
        plait_metrics_set(&m, step, (double)resumed_step + 1);
        plait_metrics_set_named(&m, "loss", 2.5);
        plait_metrics_set_named(&m, "tokens_per_s", 1234.5);
        st = plait_metrics_row(&m);
    }
    plait_metrics_close(&m);
    fuzz_refused(st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    setup();
    fuzz_write_file(path, data, size);
    comm_table();
    fuzz_write_file(path, data, size);
    sweep_csv();
    fuzz_write_file(path, data, size);
    peak_cache(data, size);
    fuzz_write_file(path, data, size);
    metrics_csv(data, size);
    return 0;
}
