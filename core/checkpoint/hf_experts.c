#include "checkpoint/hf_experts.h"

#include <stdio.h>
#include <string.h>

/* plait's names for an expert's three tensors, and each family's, in that
 * order; the block a family's sparse tensors sit under */
static const char *const plait_w[] = {"gate_proj", "up_proj", "down_proj"};
static const char *const mixtral_w[] = {"w1", "w3", "w2"};
static const char *const *family_w(plait_hf_experts f) { return f == PLAIT_HF_EXPERTS_MIXTRAL ? mixtral_w : plait_w; }
static const char *family_block(plait_hf_experts f) {
    return f == PLAIT_HF_EXPERTS_MIXTRAL ? "block_sparse_moe" : "mlp";
}

plait_expert_name plait_hf_experts_from_hf(const char *hf, char *buf, size_t cap, long long *expert,
                                           plait_hf_experts *family) {
    for (plait_hf_experts f = PLAIT_HF_EXPERTS_MIXTRAL; f <= PLAIT_HF_EXPERTS_QWEN3_MOE; f++) {
        char pattern[96], what[16] = {0};
        long long layer = -1, n = -1;
        int end = 0;
        snprintf(pattern, sizeof pattern, "model.layers.%%lld.%s.gate.weight%%n", family_block(f));
        if (sscanf(hf, pattern, &layer, &end) == 1 && end > 0 && !hf[end] && layer >= 0) {
            snprintf(buf, cap, "model.layers.%lld.mlp.router.weight", layer);
            *family = f;
            return PLAIT_EXPERT_NAME_ROUTER;
        }
        end = 0;
        snprintf(pattern, sizeof pattern, "model.layers.%%lld.%s.experts.%%lld.%%15[a-z_0-9].weight%%n",
                 family_block(f));
        if (sscanf(hf, pattern, &layer, &n, what, &end) != 3 || !end || hf[end] || layer < 0 || n < 0) continue;
        for (int i = 0; i < 3; i++)
            if (!strcmp(what, family_w(f)[i])) {
                snprintf(buf, cap, "model.layers.%lld.mlp.experts.%s.weight", layer, plait_w[i]);
                *expert = n;
                *family = f;
                return PLAIT_EXPERT_NAME_EXPERT;
            }
    }
    return PLAIT_EXPERT_NAME_NONE;
}

plait_expert_name plait_hf_experts_to_hf(plait_hf_experts family, const char *name, long long expert, char *buf,
                                         size_t cap) {
    long long layer = -1;
    int end = 0;
    char what[32] = {0};
    if (sscanf(name, "model.layers.%lld.mlp.router.weight%n", &layer, &end) == 1 && end > 0 && !name[end]) {
        if (buf) snprintf(buf, cap, "model.layers.%lld.%s.gate.weight", layer, family_block(family));
        return PLAIT_EXPERT_NAME_ROUTER;
    }
    end = 0;
    if (sscanf(name, "model.layers.%lld.mlp.router.expert_bias%n", &layer, &end) == 1 && end > 0 && !name[end])
        return PLAIT_EXPERT_NAME_BIAS;
    end = 0;
    if (sscanf(name, "model.layers.%lld.mlp.experts.%31[a-z_].weight%n", &layer, what, &end) != 2 || !end || name[end])
        return PLAIT_EXPERT_NAME_NONE;
    for (int i = 0; i < 3; i++)
        if (!strcmp(what, plait_w[i])) {
            if (buf)
                snprintf(buf, cap, "model.layers.%lld.%s.experts.%lld.%s.weight", layer, family_block(family), expert,
                         family_w(family)[i]);
            return PLAIT_EXPERT_NAME_EXPERT;
        }
    return PLAIT_EXPERT_NAME_NONE;
}
