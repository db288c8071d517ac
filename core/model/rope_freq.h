/*
 * The rotary positions' frequencies of the llama arch: Hugging Face's
 * default 1 / theta^(2i/HS), or Llama 3.1's scaled ones ([model]
 * rope_scaling = llama3, transformers' _compute_llama3_parameters).
 *
 * Pure functions, thread-safe; nothing allocated; no errors (the model
 * description checks the keys before a scaling reaches here).
 */
#ifndef PLAIT_CORE_MODEL_ROPE_FREQ_H
#define PLAIT_CORE_MODEL_ROPE_FREQ_H

#include <stdint.h>

typedef enum plait_rope_scaling_type {
    PLAIT_ROPE_SCALING_NONE = 0,  /* 1 / theta^(2i/HS) */
    PLAIT_ROPE_SCALING_LLAMA3 = 1 /* Llama 3.1's: low frequencies divided by factor, a smooth blend between */
} plait_rope_scaling_type;

/* [model] rope_scaling and its parameters (Hugging Face's rope_scaling:
 * factor, low_freq_factor, high_freq_factor, original_max_position_embeddings). */
typedef struct plait_rope_scaling {
    plait_rope_scaling_type type;
    double factor, low_freq_factor, high_freq_factor;
    int64_t original_max_pos;
} plait_rope_scaling;

/* The inverse frequency of pair i (0 <= i < HS/2) of a head of size HS,
 * in float32 as transformers computes it whatever the run's precision:
 * 1 / theta^(2i/HS), then, under llama3 scaling with wavelength
 * w = 2π / that: unchanged where w < original_max_pos / high_freq_factor,
 * divided by factor where w > original_max_pos / low_freq_factor, and in
 * between (1 - s)·f/factor + s·f with s = (original_max_pos / w -
 * low_freq_factor) / (high_freq_factor - low_freq_factor). */
float plait_rope_inv_freq(double theta, const plait_rope_scaling *scaling, int64_t i, int64_t HS);

#endif
