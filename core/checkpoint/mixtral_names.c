#include "checkpoint/mixtral_names.h"

#include <stdio.h>
#include <string.h>

/* Mixtral's w1, w3, w2 and plait's names for them, in that order */
static const char *const mixtral_w[] = {"w1", "w3", "w2"};
static const char *const plait_w[] = {"gate_proj", "up_proj", "down_proj"};

plait_mixtral_kind plait_mixtral_from_hf(const char *hf, char *buf, size_t cap, long long *expert) {
    long long layer = -1, n = -1;
    int end = 0;
    if (sscanf(hf, "model.layers.%lld.block_sparse_moe.gate.weight%n", &layer, &end) == 1 && end > 0 && !hf[end] &&
        layer >= 0) {
        snprintf(buf, cap, "model.layers.%lld.mlp.router.weight", layer);
        return PLAIT_MIXTRAL_ROUTER;
    }
    char w[3] = {0};
    end = 0;
    if (sscanf(hf, "model.layers.%lld.block_sparse_moe.experts.%lld.%2[w0-9].weight%n", &layer, &n, w, &end) != 3 ||
        !end || hf[end] || layer < 0 || n < 0)
        return PLAIT_MIXTRAL_NONE;
    for (int i = 0; i < 3; i++)
        if (!strcmp(w, mixtral_w[i])) {
            snprintf(buf, cap, "model.layers.%lld.mlp.experts.%s.weight", layer, plait_w[i]);
            *expert = n;
            return PLAIT_MIXTRAL_EXPERT;
        }
    return PLAIT_MIXTRAL_NONE;
}

plait_mixtral_kind plait_mixtral_to_hf(const char *name, long long expert, char *buf, size_t cap) {
    long long layer = -1;
    int end = 0;
    char what[32] = {0};
    if (sscanf(name, "model.layers.%lld.mlp.router.weight%n", &layer, &end) == 1 && end > 0 && !name[end]) {
        snprintf(buf, cap, "model.layers.%lld.block_sparse_moe.gate.weight", layer);
        return PLAIT_MIXTRAL_ROUTER;
    }
    end = 0;
    if (sscanf(name, "model.layers.%lld.mlp.router.expert_bias%n", &layer, &end) == 1 && end > 0 && !name[end])
        return PLAIT_MIXTRAL_BIAS;
    end = 0;
    if (sscanf(name, "model.layers.%lld.mlp.experts.%31[a-z_].weight%n", &layer, what, &end) != 2 || !end || name[end])
        return PLAIT_MIXTRAL_NONE;
    for (int i = 0; i < 3; i++)
        if (!strcmp(what, plait_w[i])) {
            snprintf(buf, cap, "model.layers.%lld.block_sparse_moe.experts.%lld.%s.weight", layer, expert,
                     mixtral_w[i]);
            return PLAIT_MIXTRAL_EXPERT;
        }
    return PLAIT_MIXTRAL_NONE;
}
