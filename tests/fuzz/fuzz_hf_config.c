/*
 * Fuzz target for the Hugging Face config.json check of [run] init_from
 * (checkpoint/llama_hf.h, plait_llama_check_hf_config): a downloaded
 * model's config.json is untrusted. The first byte picks the run's model:
 *   bit 0  q, k and v biases (qkv_bias: the file must be Qwen2's);
 *   bit 1  a mixture of experts (the file must be Mixtral's, or with
 *          bit 4 Qwen3-MoE's);
 *   bit 2  rope_scaling = llama3;
 *   bit 3  a tied head;
 *   bit 4  q and k norms (qk_norm: the file must be Qwen3's).
 * Its heads are 16 wide (head_dim, as hidden_size / num_attention_heads).
 * The rest is the file. Whatever the bytes, the check returns a status,
 * a refusal with a message, and never crashes, leaks or reads out of
 * bounds (ASan/UBSan).
 *
 * Built as `fuzz_hf_config` (PLAIT_FUZZ=ON) and as the ctest
 * `test_fuzz_hf_config_corpus` (replay_main.c over
 * tests/fuzz/corpus/hf_config, config.json files of each class).
 */
#include <stdint.h>
#include <stdio.h>

#include "checkpoint/llama_hf.h"
#include "fuzz_scratch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const unsigned pick = data[0];
    plait_llama_shape want = {.n_layer = 2,
                              .n_head = 4,
                              .n_kv_head = 2,
                              .n_embd = 64,
                              .ffn_hidden = 176,
                              .vocab_size = 256,
                              .block_size = 32,
                              .norm_eps = 1e-5,
                              .rope_theta = 10000,
                              .tied = (pick & 8) != 0,
                              .qkv_bias = (pick & 1) != 0,
                              .head_dim = 16,
                              .qk_norm = (pick & 16) != 0,
                              .rope = {(pick & 4) ? PLAIT_ROPE_SCALING_LLAMA3 : PLAIT_ROPE_SCALING_NONE, 8, 1, 4, 16}};
    if (pick & 2) {
        want.moe_experts = 4;
        want.moe_top_k = 2;
        want.moe_ffn_hidden = 176;
        want.moe_every = 1;
    }
    char path[FUZZ_PATH_MAX];
    snprintf(path, sizeof path, "%s/config.json", fuzz_scratch("plait-fuzz-hf-config"));
    fuzz_write_file(path, data + 1, size - 1);
    fuzz_refused(plait_llama_check_hf_config(path, &want));
    return 0;
}
