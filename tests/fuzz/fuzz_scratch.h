/*
 * A fuzz target's scratch directory, for readers that take a path: made
 * on the first call (plait_scratch_dir_make: under $TMPDIR, else /tmp) and
 * removed with what is in it when the process exits normally, as
 * libFuzzer does at the end of -max_total_time and the corpus replay does
 * at its end; a crash leaves it beside the crashing input. One input at a
 * time (not thread-safe). Aborts where the directory cannot be made.
 * Beside it, two helpers of the targets that read files: the input
 * written to a scratch file, and the check that a refusal says why.
 */
#ifndef PLAIT_FUZZ_SCRATCH_H
#define PLAIT_FUZZ_SCRATCH_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "runtime/error.h"
#include "runtime/scratch_dir.h"

/* room for the scratch path and a file name under it */
#define FUZZ_PATH_MAX 512

static char fuzz_scratch_path[FUZZ_PATH_MAX - 64];

static void fuzz_scratch_remove(void) { (void)plait_scratch_dir_remove(fuzz_scratch_path); }

static const char *fuzz_scratch(const char *prefix) {
    if (fuzz_scratch_path[0]) return fuzz_scratch_path;
    if (plait_scratch_dir_make(prefix, fuzz_scratch_path, sizeof fuzz_scratch_path) != PLAIT_OK) {
        fprintf(stderr, "fuzz: no scratch directory under $TMPDIR or /tmp\n");
        abort();
    }
    atexit(fuzz_scratch_remove);
    return fuzz_scratch_path;
}

/* Write the input to `path` (a scratch file); aborts where it cannot. */
static inline void fuzz_write_file(const char *path, const uint8_t *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);
}

/* A reader's refusal must say why: aborts on one without a message. */
static inline void fuzz_refused(plait_status st) {
    if (st == PLAIT_OK) return;
    if (!plait_last_error()[0]) abort();
    plait_clear_error();
}

#endif
