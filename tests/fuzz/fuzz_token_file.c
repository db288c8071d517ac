/*
 * Fuzz target for the token files a run trains on (llm.c's headers, raw
 * uint16, text): the bytes are written to a scratch file, opened as a token
 * file and as text, every token of what opens is read, and the file is
 * opened as the data of a run (twice, back to back, then beside a text
 * file: a list mixing formats) and a batch drawn. Whatever the bytes, a
 * reader returns a status with a message and never crashes, leaks or reads
 * out of bounds (ASan/UBSan); what opens as tokens holds the count its
 * size gives.
 *
 * Built as `fuzz_token_file` (PLAIT_FUZZ=ON) and as the ctest
 * `test_fuzz_token_file_corpus` (replay_main.c over tests/fuzz/corpus/token_file).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "train/data.h"
#include "train/token_file.h"
#include "fuzz_scratch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char bin[FUZZ_PATH_MAX], txt[FUZZ_PATH_MAX];

static void setup(void) {
    if (bin[0]) return;
    const char *scratch = fuzz_scratch("plait-fuzz-tokens");
    snprintf(bin, sizeof bin, "%s/x.bin", scratch);
    snprintf(txt, sizeof txt, "%s/plain.txt", scratch);
    FILE *f = fopen(txt, "wb");
    if (!f) abort();
    fputs("a plain text file of some length, longer than a sequence or two\n", f);
    fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    setup();
    FILE *f = fopen(bin, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);
    for (int text = 0; text < 2; text++) {
        plait_token_file tf;
        if (plait_token_file_open(bin, text, &tf) != PLAIT_OK) continue;
        size_t header = tf.llmc_header ? PLAIT_LLMC_HEADER_BYTES : 0;
        if ((size_t)tf.n_tokens * (size_t)tf.width + header != size) abort();
        int64_t sum = 0;
        for (int64_t i = 0; i < tf.n_tokens; i++) sum += plait_token_file_at(&tf, i);
        (void)plait_token_file_check(&tf, 50257);
        (void)plait_token_file_kind(&tf);
        volatile int64_t keep = sum;
        (void)keep;
        plait_token_file_close(&tf);
    }
    const char *twice[2] = {bin, bin}, *mixed[2] = {bin, txt};
    for (int k = 0; k < 2; k++) {
        plait_data_options o = {.paths = k ? mixed : twice, .n_paths = 2, .val_fraction = 0.1,
                                .vocab_size = 65536, .seq_len = 4, .seed = 1};
        plait_data *d = NULL;
        if (plait_data_open(&o, &d) != PLAIT_OK) continue;
        int32_t tok[8], tgt[8];
        (void)plait_data_batch(d, PLAIT_DATA_TRAIN, 3, 0, 2, 4, tok, tgt);
        (void)plait_data_batch(d, PLAIT_DATA_VAL, 0, 1, 2, 4, tok, tgt);
        plait_data_close(d);
    }
    return 0;
}
