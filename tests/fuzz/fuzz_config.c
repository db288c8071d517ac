/*
 * Fuzz target for the configuration parser: the input is INI text; every
 * line is also tried as a command-line override. Whatever the bytes, the
 * parser must return a status with a message and never crash, leak or read
 * out of bounds (run under ASan/UBSan). A configuration that finalizes has
 * the lists its keys hold parsed too: [data] weights against path's
 * patterns.
 *
 * Built two ways: with clang -fsanitize=fuzzer as `fuzz_config` (PLAIT_FUZZ=ON),
 * and linked with replay_main.c as the ctest `test_fuzz_config_corpus`, which
 * replays every file in tests/fuzz/corpus/config.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "train/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    plait_config *cfg = plait_config_new();
    if (cfg && plait_config_declare_core(cfg) == PLAIT_OK) {
        (void)plait_config_load_string(cfg, "fuzz.ini", text);
        char *line = text, *save = NULL;
        int n = 0;
        for (char *tok = strtok_r(line, "\n", &save); tok && n < 8; tok = strtok_r(NULL, "\n", &save), n++)
            (void)plait_config_add_override(cfg, tok);
        char *const env[] = {NULL};
        if (plait_config_finalize(cfg, env) == PLAIT_OK) {
            char *fp = plait_config_fingerprint(cfg);
            free(fp);
            double weights[PLAIT_DATA_MAX_SETS];
            int sets = 0;
            (void)plait_data_check_weights(cfg, weights, PLAIT_DATA_MAX_SETS, &sets);
        }
    }
    plait_config_free(cfg);
    free(text);
    return 0;
}
