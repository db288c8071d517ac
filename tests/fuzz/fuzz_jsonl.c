/*
 * Fuzz target for the JSON Lines reader `plait data prepare` takes
 * (train/jsonl.h): the input is a file's bytes, read from its start and
 * from its middle, under the key "text". Whatever the bytes, each line
 * must yield its document or an error naming the file and line, never
 * crash, leak or read out of bounds (run under ASan/UBSan); each
 * document handed over must lie inside its own decoded string.
 *
 * Built two ways: with clang -fsanitize=fuzzer as `fuzz_jsonl`
 * (PLAIT_FUZZ=ON), and linked with replay_main.c as the ctest
 * `test_fuzz_jsonl_corpus`, which replays every file in
 * tests/fuzz/corpus/jsonl.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"
#include "train/jsonl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* every byte of a document read (ASan sees an overrun), its end checked */
static plait_status take(void *ctx, const char *text, size_t len, size_t line_end) {
    size_t *sum = ctx;
    for (size_t i = 0; i < len; i++) *sum += (unsigned char)text[i];
    if (text[len] != '\0') abort(); /* the parser's strings end in a NUL */
    (void)line_end;
    return PLAIT_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t sum = 0;
    plait_status st = plait_jsonl_each(data, 0, size, "text", "fuzz.jsonl", take, &sum);
    if (st != PLAIT_OK && !plait_last_error()[0]) abort();
    plait_clear_error();
    /* from the first line start past the middle, as a validation cut */
    size_t from = size / 2;
    while (from > 0 && from < size && data[from - 1] != '\n') from++;
    st = plait_jsonl_each(data, from, size, "text", "fuzz.jsonl", take, &sum);
    if (st != PLAIT_OK && !plait_last_error()[0]) abort();
    plait_clear_error();
    return 0;
}
