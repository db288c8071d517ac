/*
 * Fuzz target for the reader of checkpoint images (checkpoint/ckpt_image.h:
 * one pipeline stage's shard as an elastic job keeps it in memory, and as a
 * restarted rank receives it from another host). The input is the image;
 * it is opened without and with CRC32C verification, and every tensor it
 * names is looked up and read from its first to its last element. Whatever
 * the bytes, the reader returns a status with a message and never reads out
 * of bounds (ASan/UBSan).
 *
 * Built as `fuzz_ckpt_image` (PLAIT_FUZZ=ON) and as the ctest
 * `test_fuzz_ckpt_image_corpus` (replay_main.c over
 * tests/fuzz/corpus/ckpt_image: images of a small model's two stages, one
 * of them cut short and one damaged).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/ckpt_image.h"
#include "runtime/error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* the image's own buffer, as a mapping would be: aligned, exactly its size */
    void *buf = NULL;
    if (posix_memalign(&buf, 64, size ? size : 1) != 0) return 0;
    if (size) memcpy(buf, data, size);
    for (int verify = 0; verify < 2; verify++) {
        plait_ckpt_image img;
        if (plait_ckpt_image_open(buf, size, verify, "the fuzzed image", &img) != PLAIT_OK) {
            plait_clear_error();
            continue;
        }
        volatile float sum = 0;
        for (size_t i = 0; i < img.n; i++) {
            const plait_st_tensor *t = plait_ckpt_image_find(&img, img.tensors[i].name);
            if (!t) abort(); /* every listed tensor is found by its name */
            if (t->numel) sum += t->data[0] + t->data[t->numel - 1];
        }
        (void)sum;
        plait_ckpt_image_free(&img);
    }
    free(buf);
    return 0;
}
