/*
 * Fuzz target for what `plait plan` reads besides a run config: the input
 * is a cluster file (INI text, configs/clusters/); every line is also read
 * as a layout name (`--explain LAYOUT`) and as an explicit partition
 * (`[parallel.pp] stages`, which the pp plugin and the planner parse with
 * plait_partition_parse) of a model of 10 layers, written back when it
 * parses. Whatever the bytes, the parsers must return a status with a
 * message and never crash, leak or read out of bounds (run under
 * ASan/UBSan).
 *
 * Built two ways: with clang -fsanitize=fuzzer as `fuzz_plan` (PLAIT_FUZZ=ON),
 * and linked with replay_main.c as the ctest `test_fuzz_plan_corpus`, which
 * replays every file in tests/fuzz/corpus/plan.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <plait/partition_util.h>

#include "cost/cluster.h"
#include "cost/layouts.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    plait_cluster c;
    if (plait_cluster_parse("fuzz.ini", text, &c) == PLAIT_OK) {
        double rate;
        (void)plait_cluster_rate(&c, PLAIT_PRECISION_BF16, &rate);
        (void)plait_cluster_inter_share(&c, c.units_per_node);
    }
    plait_cost_layout base = {.dp = 1, .tp = 1, .pp = 1, .chunks = 1, .optim = "adam", .micro_batch = 1, .comm = "tcp"};
    char *save = NULL;
    int n = 0;
    for (char *tok = strtok_r(text, "\n", &save); tok && n < 16; tok = strtok_r(NULL, "\n", &save), n++) {
        plait_cost_layout l;
        if (plait_cost_layout_parse(tok, &base, &l) == PLAIT_OK) {
            char name[128];
            plait_cost_layout_name(&l, name, sizeof name);
        }
        int32_t k = plait_partition_ranges(tok), bounds[11];
        char err[256], back[64];
        err[0] = '\0';
        if (k >= 1 && k <= 10 && plait_partition_parse(tok, 10, k, bounds, err, sizeof err) == PLAIT_OK) {
            if (plait_partition_format(bounds, k, 0, 1, back, sizeof back) >= sizeof back) abort();
        } else if (k >= 1 && k <= 10 && !err[0]) {
            abort(); /* refused without a message */
        }
    }
    free(text);
    return 0;
}
