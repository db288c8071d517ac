/*
 * Fuzz target for the parser of a sharded checkpoint's index.json
 * (checkpoint/checkpoint_index.h). The input is the index; when it parses,
 * every tensor it lists is read whole from slices backed by zeroed buffers
 * of exactly the sizes the index gives them (tensors of more than 2^20
 * elements are left unread). Whatever the bytes, the parser and the read
 * return a status with a message and never read or write out of bounds
 * (ASan/UBSan).
 *
 * Built as `fuzz_ckpt_index` (PLAIT_FUZZ=ON) and as the ctest
 * `test_fuzz_ckpt_index_corpus` (replay_main.c over
 * tests/fuzz/corpus/ckpt_index: the index of a dp 2 x tp 2 ZeRO-1 save, a
 * small one with grouped and padded slices, and malformed ones).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/checkpoint_index.h"
#include "runtime/error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    plait_ckpt_index *ix = NULL;
    if (plait_ckpt_index_parse((const char *)data, size, "the fuzzed index", &ix) != PLAIT_OK) {
        plait_clear_error();
        return 0;
    }
    plait_shard whole = {-1, 1, 0, 1, 0};
    for (int32_t i = 0; i < ix->n_tensors; i++) {
        plait_ckpt_index_tensor *t = &ix->tensors[i];
        size_t held = 0;
        for (int32_t k = 0; k < t->n_slices; k++) held += t->slices[k].end - t->slices[k].begin;
        if (t->numel > (1u << 20) || held > (1u << 22)) continue;
        float *out = malloc((t->numel ? t->numel : 1) * sizeof *out);
        for (int32_t k = 0; out && k < t->n_slices; k++) {
            size_t n = (size_t)(t->slices[k].end - t->slices[k].begin);
            t->slices[k].data = calloc(n ? n : 1, sizeof(float));
        }
        if (out && plait_ckpt_index_read(t, &whole, 0, t->numel, out, "the fuzzed index") != PLAIT_OK)
            plait_clear_error();
        for (int32_t k = 0; k < t->n_slices; k++) free((void *)t->slices[k].data);
        free(out);
    }
    plait_ckpt_index_free(ix);
    return 0;
}
