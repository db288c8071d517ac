#include "checkpoint/gpt2_names.h"

#include <stdio.h>
#include <string.h>

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static int starts_with(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

/* Names that sit under "transformer." in GPT2LMHeadModel. */
static int body_name(const char *s) {
    return starts_with(s, "wte.") || starts_with(s, "wpe.") || starts_with(s, "h.") || starts_with(s, "ln_f.");
}

plait_gpt2_kind plait_gpt2_canonical(const char *name, char *out, size_t cap) {
    while (starts_with(name, "_orig_mod.")) name += strlen("_orig_mod.");
    int n = snprintf(out, cap, "%s%s", body_name(name) ? "transformer." : "", name);
    if (n < 0 || (size_t)n >= cap) return PLAIT_GPT2_UNKNOWN;
    if (strcmp(out, "lm_head.weight") == 0) return PLAIT_GPT2_HEAD;
    if (starts_with(out, "transformer.h.") && (ends_with(out, ".attn.bias") || ends_with(out, ".attn.masked_bias")))
        return PLAIT_GPT2_BUFFER;
    static const char *const fixed[] = {"transformer.wte.weight", "transformer.wpe.weight", "transformer.ln_f.weight",
                                        "transformer.ln_f.bias"};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        if (strcmp(out, fixed[i]) == 0) return PLAIT_GPT2_PARAM;
    static const char *const block[] = {".ln_1.weight",        ".ln_1.bias",        ".attn.c_attn.weight",
                                        ".attn.c_attn.bias",   ".attn.c_proj.weight", ".attn.c_proj.bias",
                                        ".ln_2.weight",        ".ln_2.bias",        ".mlp.c_fc.weight",
                                        ".mlp.c_fc.bias",      ".mlp.c_proj.weight", ".mlp.c_proj.bias"};
    if (starts_with(out, "transformer.h.")) {
        const char *p = out + strlen("transformer.h.");
        if (*p < '0' || *p > '9') return PLAIT_GPT2_UNKNOWN;
        while (*p >= '0' && *p <= '9') p++;
        for (size_t i = 0; i < sizeof block / sizeof block[0]; i++)
            if (strcmp(p, block[i]) == 0) return PLAIT_GPT2_PARAM;
        /* a sparse block's of plait's own (GPT-2 has none): whether the model
         * has it is the caller's to check, by its name */
        if (starts_with(p, ".mlp.router.") || starts_with(p, ".mlp.experts.") || starts_with(p, ".mlp.shared_experts."))
            return PLAIT_GPT2_PARAM;
    }
    return PLAIT_GPT2_UNKNOWN;
}

int plait_gpt2_conv1d_weight(const char *name) {
    return starts_with(name, "transformer.h.") &&
           (ends_with(name, ".attn.c_attn.weight") || ends_with(name, ".attn.c_proj.weight") ||
            ends_with(name, ".mlp.c_fc.weight") || ends_with(name, ".mlp.c_proj.weight"));
}

const char *plait_gpt2_orientation_name(plait_gpt2_orientation orientation) {
    return orientation == PLAIT_GPT2_CONV1D ? "Hugging Face GPT2LMHeadModel (Conv1D weights [in, out])"
                                            : "plait/nanoGPT (nn.Linear weights [out, in])";
}
