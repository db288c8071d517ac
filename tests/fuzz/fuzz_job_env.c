/*
 * Fuzz target for what a rank and a launcher read from the job's
 * environment: the input's lines are an environment (NAME=value each, as
 * torchrun, mpirun, srun or plait's launcher set it) that the launcher
 * detection (plait_job_env_detect, the first line also as `[comm]
 * rendezvous`) and the Slurm store address read; every line is also
 * expanded as a Slurm host list (SLURM_NODELIST's "node[01-03],gpu-a"
 * syntax) and read as an --nnodes value. Whatever the bytes, each must
 * return a status (an error with a message) and never crash, leak, read
 * out of bounds or run long: a host list's expansion is bounded by
 * PLAIT_HOSTLIST_MAX names (run under ASan/UBSan).
 *
 * Built two ways: with clang -fsanitize=fuzzer as `fuzz_job_env`
 * (PLAIT_FUZZ=ON), and linked with replay_main.c as the ctest
 * `test_fuzz_job_env_corpus`, which replays every file in
 * tests/fuzz/corpus/job_env.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "launch/bootstrap.h"
#include "launch/hostlist.h"
#include "launch/slurm_env.h"
#include "runtime/error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_LINES 64

/* a failed call leaves a message (cleared before each call) */
static void check(plait_status st) {
    if (st != PLAIT_OK && !plait_last_error()[0]) abort();
    plait_clear_error();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    char *env[MAX_LINES + 1];
    int n = 0;
    for (char *p = text; *p && n < MAX_LINES;) {
        char *nl = strchr(p, '\n');
        if (nl) *nl = '\0';
        env[n++] = p;
        if (!nl) break;
        p = nl + 1;
    }
    env[n] = NULL;

    plait_clear_error();
    plait_job_env e;
    check(plait_job_env_detect(env, n ? env[0] : NULL, &e));
    char host[256];
    int port = 0;
    check(plait_slurm_store_address(env, host, sizeof host, &port));
    for (int i = 0; i < n; i++) {
        char **names = NULL;
        int count = 0;
        plait_status st = plait_hostlist_expand(env[i], "SLURM_NODELIST", &names, &count);
        check(st);
        if (st == PLAIT_OK) {
            if (count < 1 || count > PLAIT_HOSTLIST_MAX) abort();
            char first[64];
            /* the first name of the expansion, or an error when it is longer than first */
            st = plait_hostlist_first(env[i], "SLURM_NODELIST", first, sizeof first);
            check(st);
            if (st == PLAIT_OK && strcmp(first, names[0]) != 0) abort();
            plait_hostlist_free(names, count);
        }
        int lo = 0, hi = 0;
        const char *err = NULL;
        if (plait_cli_parse_nnodes(env[i], &lo, &hi, &err) != 0 ? !err : (lo < 0 || (hi && hi < lo))) abort();
    }
    free(text);
    return 0;
}
