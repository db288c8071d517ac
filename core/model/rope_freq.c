/*
 * Rotary frequencies (rope_freq.h). Every step is float32, in
 * transformers' order (its inv_freq is a float32 tensor and the scaling
 * works on it with Python floats), so a plait model rotates by the angles
 * a Hugging Face one does.
 */
#include "model/rope_freq.h"

#include <math.h>

float plait_rope_inv_freq(double theta, const plait_rope_scaling *scaling, int64_t i, int64_t HS) {
    const float inv = 1.0f / powf((float)theta, (float)(2 * i) / (float)HS);
    if (!scaling || scaling->type != PLAIT_ROPE_SCALING_LLAMA3) return inv;
    const float factor = (float)scaling->factor, low = (float)scaling->low_freq_factor;
    const float high = (float)scaling->high_freq_factor, old_len = (float)scaling->original_max_pos;
    const float wavelen = 2.0f * (float)M_PI / inv;
    if (wavelen < old_len / high) return inv;         /* high frequencies: as trained */
    if (wavelen > old_len / low) return inv / factor; /* low frequencies: stretched by factor */
    const float smooth = (old_len / wavelen - low) / (high - low);
    return (1.0f - smooth) * inv / factor + smooth * inv;
}
