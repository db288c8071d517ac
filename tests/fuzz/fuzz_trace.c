/*
 * Fuzz target for the traces plait reads back (docs/trace.md): files a user
 * hands to `plait trace` and may have edited, cut short or taken from
 * another tool.
 *   - a merged trace (trace.json), read by `plait trace summary`
 *     (plait_trace_summary) and `plait trace compare` (plait_trace_compare,
 *     the file against itself);
 *   - the ranks' own files (trace/rank-NNNNN.trace) that `plait trace
 *     merge` joins (plait_trace_merge): the input is cut at its first
 *     "\n\n" into rank 0's file and rank 1's (no cut: rank 0's alone).
 * Whatever the bytes, a reader returns a status with a message and never
 * crashes, leaks or reads out of bounds (ASan/UBSan); and a trace the merge
 * wrote reads back (plait_trace_events_read).
 *
 * Built as `fuzz_trace` (PLAIT_FUZZ=ON) and as the ctest
 * `test_fuzz_trace_corpus` (replay_main.c over tests/fuzz/corpus/trace).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/trace_compare.h"
#include "cli/trace_summary.h"
#include "fuzz_scratch.h"
#include "runtime/error.h"
#include "runtime/trace_merge.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char merged_in[FUZZ_PATH_MAX], run_dir[FUZZ_PATH_MAX], rank_dir[FUZZ_PATH_MAX], rank0[FUZZ_PATH_MAX],
    rank1[FUZZ_PATH_MAX], merged_out[FUZZ_PATH_MAX];
static FILE *devnull;

/* The scratch files' names and the sink the readers print to, made once. */
static void setup(void) {
    if (devnull) return;
    const char *d = fuzz_scratch("plait-fuzz-trace");
    snprintf(merged_in, sizeof merged_in, "%s/in.json", d);
    snprintf(run_dir, sizeof run_dir, "%s/run", d);
    snprintf(rank_dir, sizeof rank_dir, "%s/run/trace", d);
    snprintf(rank0, sizeof rank0, "%s/rank-00000.trace", rank_dir);
    snprintf(rank1, sizeof rank1, "%s/rank-00001.trace", rank_dir);
    snprintf(merged_out, sizeof merged_out, "%s/trace.json", run_dir);
    if ((mkdir(run_dir, 0700) != 0 || mkdir(rank_dir, 0700) != 0) || !(devnull = fopen("/dev/null", "w"))) abort();
}

static void read_merged(const char *path) {
    fuzz_refused(plait_trace_summary(path, devnull));
    fuzz_refused(plait_trace_compare(path, path, 3, devnull));
}

static void merge_ranks(const uint8_t *data, size_t size) {
    size_t cut = size;
    for (size_t i = 0; i + 1 < size; i++)
        if (data[i] == '\n' && data[i + 1] == '\n') {
            cut = i + 1;
            break;
        }
    fuzz_write_file(rank0, data, cut);
    if (cut + 1 < size) fuzz_write_file(rank1, data + cut + 1, size - cut - 1);
    else unlink(rank1);
    int ranks = 0;
    plait_status st = plait_trace_merge(run_dir, &ranks);
    fuzz_refused(st);
    if (st != PLAIT_OK) return;
    if (ranks < 1 || ranks > 2) abort();
    /* what the merge wrote reads back */
    plait_trace_event *ev = NULL;
    size_t n = 0;
    if (plait_trace_events_read(merged_out, &ev, &n) != PLAIT_OK) {
        fprintf(stderr, "fuzz_trace: the merged trace does not read back: %s\n", plait_last_error());
        abort();
    }
    free(ev);
    read_merged(merged_out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    setup();
    fuzz_write_file(merged_in, data, size);
    read_merged(merged_in);
    merge_ranks(data, size);
    return 0;
}
