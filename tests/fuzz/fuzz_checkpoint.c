/*
 * Fuzz target for the checkpoint readers. The first byte picks the reader,
 * the rest is its input:
 *   0  a safetensors file (written to a scratch file, opened with checksum
 *      verification, every tensor looked up and read; with the next bit of
 *      the first byte set, F16, BF16 and F64 tensors converted);
 *   1  a checkpoint directory's state.json (parsed as plait_ckpt_open does);
 *   2  a whole checkpoint: the bytes split at the first two 0xff bytes into
 *      model.safetensors, optim.safetensors and state.json, with a COMPLETE
 *      marker signing state.json, opened and checked for non-finite values.
 * Whatever the bytes, a reader returns a status with a message and never
 * crashes, leaks or reads out of bounds (ASan/UBSan).
 *
 * Built as `fuzz_checkpoint` (PLAIT_FUZZ=ON) and as the ctest
 * `test_fuzz_checkpoint_corpus` (replay_main.c over tests/fuzz/corpus/checkpoint).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_state.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_crc32c.h"
#include "checkpoint/safetensors_json.h"
#include "fuzz_scratch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *scratch_dir(void) { return fuzz_scratch("plait-fuzz-ckpt"); }

static void put(const char *dir, const char *name, const void *p, size_t n) {
    char path[FUZZ_PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (n && fwrite(p, 1, n, f) != n) abort();
    fclose(f);
}

static void read_all_tensors(const plait_st_file *f) {
    float sink = 0;
    for (size_t i = 0; i < plait_st_count(f); i++) {
        const plait_st_tensor *t = plait_st_tensor_at(f, i);
        if (plait_st_find(f, t->name) == NULL) abort(); /* every listed tensor is found by name */
        for (size_t k = 0; k < t->numel; k++) sink += t->data[k];
    }
    (void)plait_st_metadata(f, "format");
    volatile float keep = sink;
    (void)keep;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const char *dir = scratch_dir();
    const uint8_t *in = data + 1;
    size_t n = size - 1;
    if (data[0] % 3 == 0) {
        put(dir, "x.safetensors", in, n);
        char path[FUZZ_PATH_MAX];
        snprintf(path, sizeof path, "%s/x.safetensors", dir);
        plait_st_file *f = NULL;
        /* half of them also take F16, BF16 and F64 (converted) */
        unsigned flags = PLAIT_ST_VERIFY | ((data[0] / 3) % 2 ? PLAIT_ST_CONVERT : 0u);
        if (plait_st_open(path, flags, &f) == PLAIT_OK) read_all_tensors(f);
        plait_st_close(f);
    } else if (data[0] % 3 == 1) {
        plait_json_doc *doc = NULL;
        plait_ckpt_state state;
        const plait_json *meta = NULL;
        plait_ckpt_file_fact facts[2];
        (void)plait_ckpt_state_parse(dir, (const char *)in, n, &doc, &state, &meta, facts);
        plait_json_free(doc);
    } else {
        char ck_dir[128];
        snprintf(ck_dir, sizeof ck_dir, "%s/ckpt-00000001", dir);
        mkdir(ck_dir, 0755);
        const uint8_t *cut1 = memchr(in, 0xff, n);
        const uint8_t *cut2 = cut1 ? memchr(cut1 + 1, 0xff, n - (size_t)(cut1 + 1 - in)) : NULL;
        if (!cut1 || !cut2) return 0;
        put(ck_dir, "model.safetensors", in, (size_t)(cut1 - in));
        put(ck_dir, "optim.safetensors", cut1 + 1, (size_t)(cut2 - cut1 - 1));
        size_t sl = n - (size_t)(cut2 + 1 - in);
        put(ck_dir, "state.json", cut2 + 1, sl);
        char marker[128];
        int ml = snprintf(marker, sizeof marker, "plait-checkpoint step=1 state.json crc32c=%08x\n",
                          plait_crc32c(0, cut2 + 1, sl));
        put(ck_dir, "COMPLETE", marker, (size_t)ml);
        plait_ckpt *ck = NULL;
        if (plait_ckpt_open(ck_dir, &ck) == PLAIT_OK) {
            (void)plait_ckpt_check_finite(ck);
            for (int f = 0; f < 2; f++) read_all_tensors(plait_ckpt_st(ck, (plait_ckpt_file)f));
        }
        plait_ckpt_close(ck);
    }
    return 0;
}
