/*
 * Fuzz target for [run] init_from's reader (checkpoint/weights_import.h):
 * pretrained GPT-2 weights are files users download, so every byte of them
 * is untrusted. The first byte picks how the rest is read:
 *   bit 0  the model's vocabulary: 10 (a GPT-2-style file's own) or 16
 *          (padded: rows past the file's are zero);
 *   bit 1  block_size 4 or 2 (a longer position table is cut);
 *   bit 2  read as the two tensor-parallel slices of every parameter
 *          instead of whole tensors;
 *   bit 3  the file given as a directory holding model.safetensors.
 * The rest is the safetensors file, checked against a 1-layer, 2-head,
 * width-8 GPT. Whatever the bytes, opening returns a status with a message
 * and never crashes, leaks or reads out of bounds (ASan/UBSan); weights
 * that open are finite and every element of every slice reads back finite
 * (padding positions zero), read whole or in two pieces alike.
 *
 * Built as `fuzz_weights` (PLAIT_FUZZ=ON) and as the ctest
 * `test_fuzz_weights_corpus` (replay_main.c over tests/fuzz/corpus/weights).
 * tests/fuzz/make_weights_seeds.py wrote the seeds.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint/weights_import.h"
#include "config/config.h"
#include "fuzz_scratch.h"
#include "model/model.h"
#include "runtime/error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The model description of each (vocabulary, block_size) variant, made
 * once: describing a model is not what is fuzzed. */
static const plait_model_spec *spec_for(int padded_vocab, int short_block) {
    static plait_model_desc *desc[4];
    static plait_config *cfg[4];
    const int v = (padded_vocab ? 1 : 0) | (short_block ? 2 : 0);
    if (!desc[v]) {
        char ini[160];
        snprintf(ini, sizeof ini, "[model]\nn_layer = 1\nn_head = 2\nn_embd = 8\nblock_size = %d\nvocab_size = %d\n",
                 short_block ? 2 : 4, padded_vocab ? 16 : 10);
        char *const no_env[] = {NULL};
        cfg[v] = plait_config_new();
        if (!cfg[v] || plait_config_declare_core(cfg[v]) != PLAIT_OK ||
            plait_config_load_string(cfg[v], "fuzz.ini", ini) != PLAIT_OK ||
            plait_config_finalize(cfg[v], no_env) != PLAIT_OK || plait_model_describe(cfg[v], 1, &desc[v]) != PLAIT_OK) {
            fprintf(stderr, "fuzz_weights: the model description failed: %s\n", plait_last_error());
            abort();
        }
    }
    return plait_model_desc_spec(desc[v]);
}

/* Read `p`'s slice whole, then in two pieces; both finite and equal. */
static void read_slice(plait_weights *w, const plait_param *p) {
    float *whole = malloc((p->numel ? p->numel : 1) * sizeof *whole);
    float *parts = malloc((p->numel ? p->numel : 1) * sizeof *parts);
    if (!whole || !parts) abort();
    if (plait_weights_read(w, p, 0, p->numel, whole) != PLAIT_OK) abort(); /* checked at open */
    size_t half = p->numel / 2;
    if (plait_weights_read(w, p, 0, half, parts) != PLAIT_OK ||
        plait_weights_read(w, p, half, p->numel - half, parts + half) != PLAIT_OK)
        abort();
    for (size_t i = 0; i < p->numel; i++)
        if (!isfinite(whole[i]) || memcmp(&whole[i], &parts[i], sizeof whole[i]) != 0) abort();
    free(whole);
    free(parts);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const char *dir = fuzz_scratch("plait-fuzz-weights");
    const int padded = data[0] & 1, short_block = (data[0] >> 1) & 1, tp = (data[0] >> 2) & 1,
              as_dir = (data[0] >> 3) & 1;
    const plait_model_spec *spec = spec_for(padded, short_block);

    char path[FUZZ_PATH_MAX];
    if (as_dir) {
        snprintf(path, sizeof path, "%s/weights", dir);
        mkdir(path, 0755);
        snprintf(path, sizeof path, "%s/weights/model.safetensors", dir);
    } else
        snprintf(path, sizeof path, "%s/x.safetensors", dir);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (size > 1 && fwrite(data + 1, 1, size - 1, f) != size - 1) abort();
    fclose(f);
    if (as_dir) snprintf(path, sizeof path, "%s/weights", dir);

    plait_weights *w = NULL;
    plait_status st = plait_weights_open(path, spec, NULL, &w);
    if (st != PLAIT_OK) {
        if (w || !plait_last_error()[0]) abort(); /* a refusal says why and hands nothing back */
        plait_clear_error();
        return 0;
    }
    (void)plait_gpt2_orientation_name(plait_weights_orientation(w));
    if (!plait_weights_note(w) || !plait_weights_path(w)) abort();
    for (int32_t i = 0; i < spec->n_params; i++) {
        plait_param p = spec->params[i];
        if (p.flags & PLAIT_PARAM_TIED_COPY) continue;
        for (int32_t rank = 0; rank < (tp ? 2 : 1); rank++) {
            plait_shard s = p.shard;
            if (tp && p.tp_role != PLAIT_TP_REPLICATE) {
                s.parts = 2;
                s.index = rank;
                if (p.tp_role == PLAIT_TP_VOCAB) s.padded_len = p.shape[0];
            } else if (rank > 0)
                continue;
            if (plait_param_apply_shard(&p, &s) != PLAIT_OK) abort(); /* the model's own shapes split */
            read_slice(w, &p);
        }
    }
    plait_weights_close(w);
    return 0;
}
