/*
 * The global model description: layers and parameters with nanoGPT names,
 * PyTorch shapes ([out, in] for linears), tensor-parallel roles, and cost
 * estimates for pipeline planning.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_internal.h"
#include "model/tied.h"
#include "runtime/error.h"

static char *keep_name(plait_model_desc *d, const char *fmt, int a) {
    char buf[128];
    snprintf(buf, sizeof buf, fmt, a);
    char *s = strdup(buf);
    if (s) d->names[d->n_names++] = s;
    return s;
}

static plait_status add_param(plait_model_desc *d, const char *name, int32_t layer, int32_t ndim,
                              int64_t d0, int64_t d1, plait_tp_role role, int32_t groups,
                              uint32_t flags) {
    plait_param *p = &d->params[d->spec.n_params];
    memset(p, 0, sizeof *p);
    p->struct_size = sizeof *p;
    p->name = name;
    p->index = d->spec.n_params;
    p->layer = layer;
    p->ndim = ndim;
    p->shape[0] = d0;
    p->shape[1] = ndim > 1 ? d1 : 0;
    p->tp_role = role;
    p->flags = flags | (ndim < 2 ? PLAIT_PARAM_NO_DECAY : 0u);
    p->tied_to = -1;
    /* The unsplit layout, with the dimension a TP split would cut and the
     * number of fused groups: a TP plugin only sets parts/index (and
     * padded_len for the vocabulary). */
    p->shard.dim = role == PLAIT_TP_COLUMN || role == PLAIT_TP_VOCAB ? 0
                   : role == PLAIT_TP_ROW                         ? 1
                                                                  : -1;
    p->shard.parts = 1;
    p->shard.index = 0;
    p->shard.groups = groups;
    p->shard.padded_len = p->shard.dim >= 0 ? p->shape[p->shard.dim] : 0;
    for (int i = 0; i < ndim; i++) p->local_shape[i] = p->shape[i];
    p->numel = (size_t)(d0 * (ndim > 1 ? d1 : 1));
    d->spec.n_params++;
    plait_layer *ly = &d->layers[layer];
    if (ly->n_params == 0) ly->first_param = p->index;
    ly->n_params++;
    return name ? PLAIT_OK : plait_set_error(PLAIT_ERR_NO_MEMORY, "model description: out of memory");
}

#define ADD(name, ...)                                                            \
    do {                                                                          \
        plait_status st_ = add_param(d, name, __VA_ARGS__);                       \
        if (st_ != PLAIT_OK) return st_;                                          \
    } while (0)

/* An expert tensor stacked over the experts: [E, d0, d1] (d1 = 0: [E, d0],
 * a bias). Under tp each expert's [out, in] splits as a dense MLP's does
 * (Megatron-Core's expert tensor parallelism = tp): `role` names the
 * split, which cuts dimension 1 (column) or 2 (row) of the stacked
 * tensor, dimension 0 being the expert that ep splits. */
static plait_status add_stacked(plait_model_desc *d, const char *name, int32_t layer, int64_t d0, int64_t d1,
                                plait_tp_role role) {
    const int64_t E = d->moe.experts;
    plait_status st = add_param(d, name, layer, 2, E, d1 ? d0 * d1 : d0, PLAIT_TP_REPLICATE, 1, PLAIT_PARAM_EXPERT);
    if (st != PLAIT_OK) return st;
    plait_param *p = &d->params[d->spec.n_params - 1];
    if (d1) {
        p->ndim = 3;
        p->shape[1] = p->local_shape[1] = d0;
        p->shape[2] = p->local_shape[2] = d1;
    }
    p->tp_role = role;
    p->shard.dim = role == PLAIT_TP_COLUMN ? 1 : role == PLAIT_TP_ROW ? 2 : -1;
    p->shard.padded_len = p->shard.dim >= 0 ? p->shape[p->shard.dim] : 0;
    return PLAIT_OK;
}

/* Activation bytes of a sparse block per micro-batch: its attention half
 * and norm as a dense block's, the router's logits and scores (2E a
 * token), each of its k routes' index, gate and row (3), input and
 * output rows (2C) and expert activations (3F), the shared experts' (3SF). */
static size_t moe_activation_bytes(const plait_model_desc *d) {
    const double C = d->n_embd, F = d->moe.ffn, E = d->moe.experts, k = d->moe.top_k, S = d->moe.shared;
    const double per_token = 8.0 * C + 4.0 + d->n_head + 2.0 * E + k * (3.0 + 2.0 * C + 3.0 * F) + 3.0 * S * F;
    return (size_t)((double)d->micro_batch * (double)d->block_size * per_token * 4.0);
}

/* A sparse block's MoE parameters (model_internal.h: MOE_*) after its
 * MLP norm: `fmt` names a block's tensor (the arch's block prefix, its
 * index and the tensor's name), `names`
 * the architecture's expert tensors, `bias[i]` whether tensor i is a bias
 * [E, out], else an [E, out, in] weight whose out/in are given by
 * `wide[i]` (1: F by C, 0: C by F). Its forward cost per token too. */
static plait_status add_moe(plait_model_desc *d, int32_t l, const char *fmt, const char *const *names, int n,
                            const int *bias, const int *wide) {
    const int64_t C = d->n_embd, F = d->moe.ffn, E = d->moe.experts, S = d->moe.shared;
    const int32_t ly = l + 1;
    char buf[96];
    d->moe_first[l] = d->spec.n_params;
    snprintf(buf, sizeof buf, fmt, "mlp.router.weight");
    ADD(keep_name(d, buf, l), ly, 2, E, C, PLAIT_TP_REPLICATE, 1, 0);
    snprintf(buf, sizeof buf, fmt, "mlp.router.expert_bias");
    /* a buffer, not a parameter: the trainer moves it (model_buffers.c) */
    ADD(keep_name(d, buf, l), ly, 1, E, 0, PLAIT_TP_REPLICATE, 1, PLAIT_PARAM_NO_DECAY | PLAIT_PARAM_BUFFER);
    for (int i = 0; i < n; i++) {
        char sub[64];
        snprintf(sub, sizeof sub, "mlp.experts.%s", names[i]);
        snprintf(buf, sizeof buf, fmt, sub);
        /* c_fc, gate, up column-parallel; c_proj, down row-parallel, their bias replicated */
        const plait_tp_role role = wide[i] ? PLAIT_TP_COLUMN : bias[i] ? PLAIT_TP_REPLICATE : PLAIT_TP_ROW;
        plait_status st = bias[i]   ? add_stacked(d, keep_name(d, buf, l), ly, wide[i] ? F : C, 0, role)
                          : wide[i] ? add_stacked(d, keep_name(d, buf, l), ly, F, C, role)
                                    : add_stacked(d, keep_name(d, buf, l), ly, C, F, role);
        if (st != PLAIT_OK) return st;
    }
    for (int i = 0; S > 0 && i < n; i++) {
        char sub[64];
        snprintf(sub, sizeof sub, "mlp.shared_experts.%s", names[i]);
        snprintf(buf, sizeof buf, fmt, sub);
        const int64_t out = wide[i] ? S * F : C, in = wide[i] ? C : S * F;
        const plait_tp_role role = wide[i] ? PLAIT_TP_COLUMN : bias[i] ? PLAIT_TP_REPLICATE : PLAIT_TP_ROW;
        ADD(keep_name(d, buf, l), ly, bias[i] ? 1 : 2, out, bias[i] ? 0 : in, role, 1, 0);
    }
    /* the router and k experts' products, the shared experts' (as nanoGPT
     * counts: 2 flops a multiply-add) */
    const double per_expert = 2.0 * (double)(n == MOE_GPT_TENSORS ? 2 : 3) * (double)(C * F);
    d->layers[ly].flops_per_token = 2.0 * (double)(C * E) + per_expert * (double)(d->moe.top_k + S);
    return PLAIT_OK;
}

/* The layers every architecture has: the embedding, the blocks h.0 ..,
 * the head. */
static plait_status name_layers(plait_model_desc *d) {
    const int64_t L = d->n_layer;
    d->spec.n_layers = (int32_t)L + 2;
    for (int32_t i = 0; i < d->spec.n_layers; i++) {
        plait_layer *ly = &d->layers[i];
        ly->struct_size = sizeof *ly;
        ly->index = i;
        ly->name = i == 0 ? "embedding" : i == L + 1 ? "head" : keep_name(d, "h.%d", i - 1);
        if (!ly->name) return plait_set_error(PLAIT_ERR_NO_MEMORY, "model description: out of memory");
    }
    return PLAIT_OK;
}

/* The output projection, last parameter of every architecture's head
 * (a tied copy of the token embedding where d->tied), the head's costs,
 * and the model's parameter count (a tied copy counted once). */
static plait_status add_lm_head(plait_model_desc *d) {
    const int64_t C = d->n_embd, V = d->vocab_size, T = d->block_size;
    const int32_t hl = d->n_layer + 1;
    d->p_lm_head = d->spec.n_params;
    ADD("lm_head.weight", hl, 2, V, C, PLAIT_TP_VOCAB, 1, d->tied ? PLAIT_PARAM_TIED_COPY : 0);
    if (d->tied) d->params[d->p_lm_head].tied_to = d->p_wte;
    d->layers[hl].flops_per_token = 2.0 * (double)(V * C);
    d->layers[hl].activation_bytes = (size_t)((double)d->micro_batch * (double)T * (double)(C + 3 + V) * 4.0);
    d->spec.total_numel = 0;
    for (int32_t i = 0; i < d->spec.n_params; i++)
        if (!plait_tied_is_copy(&d->params[i])) d->spec.total_numel += d->params[i].numel;
    return PLAIT_OK;
}

static plait_status build(plait_model_desc *d) {
    const int64_t C = d->n_embd, V = d->vocab_size, T = d->block_size, L = d->n_layer;
    const int64_t H = d->n_head;
    const double B = d->micro_batch;
    /* embedding */
    d->p_wte = d->spec.n_params;
    ADD("transformer.wte.weight", 0, 2, V, C, PLAIT_TP_VOCAB, 1, 0);
    d->p_wpe = d->spec.n_params;
    ADD("transformer.wpe.weight", 0, 2, T, C, PLAIT_TP_REPLICATE, 1, 0);
    d->layers[0].flops_per_token = 2.0 * (double)C;
    d->layers[0].activation_bytes = (size_t)(B * (double)(T * C) * 4.0);
    /* blocks */
    for (int32_t l = 0; l < L; l++) {
        int32_t ly = l + 1;
#define BLOCK_NAME(s) keep_name(d, "transformer.h.%d." s, l)
        if (d->is_gpt) {
            ADD(BLOCK_NAME("ln_1.weight"), ly, 1, C, 0, PLAIT_TP_REPLICATE, 1, 0);
            ADD(BLOCK_NAME("ln_1.bias"), ly, 1, C, 0, PLAIT_TP_REPLICATE, 1, 0);
            ADD(BLOCK_NAME("attn.c_attn.weight"), ly, 2, 3 * C, C, PLAIT_TP_COLUMN, 3, 0);
            ADD(BLOCK_NAME("attn.c_attn.bias"), ly, 1, 3 * C, 0, PLAIT_TP_COLUMN, 3, 0);
            ADD(BLOCK_NAME("attn.c_proj.weight"), ly, 2, C, C, PLAIT_TP_ROW, 1, 0);
            ADD(BLOCK_NAME("attn.c_proj.bias"), ly, 1, C, 0, PLAIT_TP_REPLICATE, 1, 0);
        }
        ADD(BLOCK_NAME("ln_2.weight"), ly, 1, C, 0, PLAIT_TP_REPLICATE, 1, 0);
        ADD(BLOCK_NAME("ln_2.bias"), ly, 1, C, 0, PLAIT_TP_REPLICATE, 1, 0);
        if (d->moe_first[l] == 0) { /* marked sparse by plait_model_describe */
            static const char *const names[] = {"c_fc.weight", "c_fc.bias", "c_proj.weight", "c_proj.bias"};
            static const int bias[] = {0, 1, 0, 1}, wide[] = {1, 1, 0, 0};
            plait_status st = add_moe(d, l, "transformer.h.%%d.%s", names, MOE_GPT_TENSORS, bias, wide);
            if (st != PLAIT_OK) return st;
            d->layers[ly].flops_per_token += 2.0 * (4.0 * (double)(C * C)) + 4.0 * (double)(T * C);
            d->layers[ly].activation_bytes = moe_activation_bytes(d);
            continue;
        }
        ADD(BLOCK_NAME("mlp.c_fc.weight"), ly, 2, 4 * C, C, PLAIT_TP_COLUMN, 1, 0);
        ADD(BLOCK_NAME("mlp.c_fc.bias"), ly, 1, 4 * C, 0, PLAIT_TP_COLUMN, 1, 0);
        ADD(BLOCK_NAME("mlp.c_proj.weight"), ly, 2, C, 4 * C, PLAIT_TP_ROW, 1, 0);
        ADD(BLOCK_NAME("mlp.c_proj.bias"), ly, 1, C, 0, PLAIT_TP_REPLICATE, 1, 0);
#undef BLOCK_NAME
        /* forward multiply-adds ×2, attention as nanoGPT counts it (QKᵀ and att·V) */
        double mlp_flops = 2.0 * (8.0 * (double)(C * C));
        double attn_flops = 2.0 * (4.0 * (double)(C * C)) + 4.0 * (double)(T * C);
        d->layers[ly].flops_per_token = mlp_flops + (d->is_gpt ? attn_flops : 0.0);
        /* saved per token: ln_2 (C+2), fc and gelu (8C), output (C); attention:
         * ln_1 (C+2), qkv (3C), its output (C), residual (C), probabilities
         * (H·T), or with fused attention (plait's devices, head sizes up to
         * PLAIT_ATTENTION_FUSED_MAX_HS) each row's log-sum-exp (H) */
        const int fused = C / H <= PLAIT_ATTENTION_FUSED_MAX_HS;
        const double att = fused ? (double)H : (double)(H * T);
        double per_token = (double)(10 * C + 2);
        if (d->is_gpt) per_token += (double)(6 * C + 2) + att;
        /* recompute: selective drops the GELU output (4C) and the
         * probabilities (H·T; a fused attention has none to drop); full
         * keeps the block's output alone */
        if (d->recompute == PLAIT_RECOMPUTE_SELECTIVE)
            per_token -= (double)(4 * C) + (d->is_gpt && !fused ? att : 0.0);
        else if (d->recompute == PLAIT_RECOMPUTE_FULL)
            per_token = (double)C;
        d->layers[ly].activation_bytes = (size_t)(B * (double)T * per_token * 4.0);
    }
    /* head */
    int32_t hl = (int32_t)L + 1;
    d->p_lnf_w = d->spec.n_params;
    ADD("transformer.ln_f.weight", hl, 1, C, 0, PLAIT_TP_REPLICATE, 1, 0);
    d->p_lnf_b = d->spec.n_params;
    ADD("transformer.ln_f.bias", hl, 1, C, 0, PLAIT_TP_REPLICATE, 1, 0);
    return add_lm_head(d);
}

/* The Llama family (Hugging Face's LlamaForCausalLM names and shapes):
 * the token embedding, blocks of RMSNorm, q/k/v/o projections (k and v of
 * n_kv_head heads), RMSNorm and the SwiGLU MLP (gate, up, down), no
 * biases; then the final RMSNorm and lm_head, untied unless [model]
 * tie_embeddings. Under tensor parallelism q, k, v, gate and up would be
 * column-parallel and o, down row-parallel (Megatron's split; the model
 * refuses tp for now, model.c). */
static plait_status build_llama(plait_model_desc *d) {
    const int64_t C = d->n_embd, V = d->vocab_size, T = d->block_size, L = d->n_layer;
    const int64_t H = d->n_head, KV = d->n_kv_head, HS = d->head_dim, F = d->ffn_hidden, A = H * HS;
    const double B = d->micro_batch;
    d->p_wte = d->spec.n_params;
    ADD("model.embed_tokens.weight", 0, 2, V, C, PLAIT_TP_VOCAB, 1, 0);
    d->p_wpe = -1;
    d->layers[0].flops_per_token = 0.0;
    d->layers[0].activation_bytes = (size_t)(B * (double)(T * C) * 4.0);
    for (int32_t l = 0; l < L; l++) {
        const int32_t ly = l + 1;
#define BLOCK_NAME(s) keep_name(d, "model.layers.%d." s, l)
        ADD(BLOCK_NAME("input_layernorm.weight"), ly, 1, C, 0, PLAIT_TP_REPLICATE, 1, 0);
        ADD(BLOCK_NAME("self_attn.q_proj.weight"), ly, 2, A, C, PLAIT_TP_COLUMN, 1, 0);
        ADD(BLOCK_NAME("self_attn.k_proj.weight"), ly, 2, KV * HS, C, PLAIT_TP_COLUMN, 1, 0);
        ADD(BLOCK_NAME("self_attn.v_proj.weight"), ly, 2, KV * HS, C, PLAIT_TP_COLUMN, 1, 0);
        if (d->qkv_bias) { /* after the three weights, which stay side by side (llama_layers.c) */
            ADD(BLOCK_NAME("self_attn.q_proj.bias"), ly, 1, A, 0, PLAIT_TP_COLUMN, 1, 0);
            ADD(BLOCK_NAME("self_attn.k_proj.bias"), ly, 1, KV * HS, 0, PLAIT_TP_COLUMN, 1, 0);
            ADD(BLOCK_NAME("self_attn.v_proj.bias"), ly, 1, KV * HS, 0, PLAIT_TP_COLUMN, 1, 0);
        }
        if (d->qk_norm) { /* one weight for every query head, one for every key head (qk_norm.h) */
            ADD(BLOCK_NAME("self_attn.q_norm.weight"), ly, 1, HS, 0, PLAIT_TP_REPLICATE, 1, 0);
            ADD(BLOCK_NAME("self_attn.k_norm.weight"), ly, 1, HS, 0, PLAIT_TP_REPLICATE, 1, 0);
        }
        ADD(BLOCK_NAME("self_attn.o_proj.weight"), ly, 2, C, A, PLAIT_TP_ROW, 1, 0);
        ADD(BLOCK_NAME("post_attention_layernorm.weight"), ly, 1, C, 0, PLAIT_TP_REPLICATE, 1, 0);
        if (d->moe_first[l] == 0) { /* marked sparse by plait_model_describe */
            static const char *const names[] = {"gate_proj.weight", "up_proj.weight", "down_proj.weight"};
            static const int bias[] = {0, 0, 0}, wide[] = {1, 1, 0};
            plait_status st = add_moe(d, l, "model.layers.%%d.%s", names, MOE_LLAMA_TENSORS, bias, wide);
            if (st != PLAIT_OK) return st;
            d->layers[ly].flops_per_token += 2.0 * (2.0 * (double)(C * A) + 2.0 * (double)(C * KV * HS)) +
                                             4.0 * (double)(T * A);
            d->layers[ly].activation_bytes = moe_activation_bytes(d);
            continue;
        }
        ADD(BLOCK_NAME("mlp.gate_proj.weight"), ly, 2, F, C, PLAIT_TP_COLUMN, 1, 0);
        ADD(BLOCK_NAME("mlp.up_proj.weight"), ly, 2, F, C, PLAIT_TP_COLUMN, 1, 0);
        ADD(BLOCK_NAME("mlp.down_proj.weight"), ly, 2, C, F, PLAIT_TP_ROW, 1, 0);
#undef BLOCK_NAME
        /* forward multiply-adds ×2: q and o (C·A each, A = H·HS the
         * attention's width), k and v (C·KV·HS each), the MLP's three
         * (C·F each); attention's QKᵀ and att·V as for the gpt arch, A wide */
        const double proj = 2.0 * (2.0 * (double)(C * A) + 2.0 * (double)(C * KV * HS) + 3.0 * (double)(C * F));
        d->layers[ly].flops_per_token = proj + 4.0 * (double)(T * A);
        /* saved per token: the norms' outputs and rstd, q, k, v (A +
         * 2·KV·HS), the attention's output (A), the residual, each head's
         * log-sum-exp (H), gate, up and SwiGLU's output (3F): as counted
         * where A = C, 4C + 2 with the norms and the residual */
        const double per_token = (double)(2 * C + 2 * A + 2 + 2 * KV * HS + H + 3 * F) +
                                 (d->qk_norm ? (double)((H + KV) * (HS + 1)) : 0.0); /* q, k before their norms */
        d->layers[ly].activation_bytes = (size_t)(B * (double)T * per_token * 4.0);
    }
    const int32_t hl = (int32_t)L + 1;
    d->p_lnf_w = d->spec.n_params;
    ADD("model.norm.weight", hl, 1, C, 0, PLAIT_TP_REPLICATE, 1, 0);
    d->p_lnf_b = -1;
    return add_lm_head(d);
}

/* Llama's rule for the MLP's width (Meta's reference code): 8/3 of
 * n_embd, scaled by ffn_multiplier, rounded up to a multiple of
 * multiple_of. */
static int64_t llama_ffn_hidden(int64_t C, double multiplier, int64_t multiple_of) {
    int64_t hidden = 2 * (4 * C) / 3;
    hidden = (int64_t)(multiplier * (double)hidden);
    return multiple_of * ((hidden + multiple_of - 1) / multiple_of);
}

/* The llama keys together, and what the kernels need of them. */
/* The rope_scaling parameters: read only under rope_scaling = llama3 (one
 * set without it would be ignored in silence: refused), and the blend's
 * band must be one (low_freq_factor below high_freq_factor). */
static plait_status check_rope_scaling(const plait_config *cfg) {
    static const char *const params[] = {"rope_factor", "rope_low_freq_factor", "rope_high_freq_factor",
                                         "rope_original_max_pos", NULL};
    if (strcmp(plait_config_str(cfg, "model", "rope_scaling"), "llama3") != 0) {
        for (int i = 0; params[i]; i++) {
            const char *where = NULL;
            if (plait_config_origin(cfg, "model", params[i], &where) == PLAIT_ORIGIN_DEFAULT) continue;
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                                   "%s: [model] %s is a parameter of rope_scaling = llama3, and this model has "
                                   "rope_scaling = %s (remove it, or set rope_scaling = llama3)",
                                   where ? where : "config", params[i], plait_config_str(cfg, "model", "rope_scaling"));
        }
        return PLAIT_OK;
    }
    const double low = plait_config_float(cfg, "model", "rope_low_freq_factor");
    const double high = plait_config_float(cfg, "model", "rope_high_freq_factor");
    if (!(low < high))
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "[model] rope_low_freq_factor = %g, rope_high_freq_factor = %g: llama3 scaling blends "
                               "the wavelengths between rope_original_max_pos / high and / low, so low must be below "
                               "high (Llama 3.1: 1 and 4)",
                               low, high);
    return PLAIT_OK;
}

/* Where a refusal of [model] `a` against `b` (NULL: `a` alone) was set,
 * for its message ("a.ini:12", "command line 'model.n_head=5'"): the
 * later of the two to be given (the command line over the environment
 * over the file over the default), `a` where both came alike. */
static const char *key_where(const plait_config *cfg, const char *a, const char *b) {
    const char *wa = NULL, *wb = NULL;
    const plait_value_origin oa = plait_config_origin(cfg, "model", a, &wa);
    if (b && plait_config_origin(cfg, "model", b, &wb) > oa && oa != PLAIT_ORIGIN_DERIVED && wb) return wb;
    return wa ? wa : "config";
}

static plait_status check_llama(const plait_config *cfg, int64_t n_head, int64_t n_embd, int64_t *kv, int64_t *ffn,
                                int64_t *hs) {
    *kv = plait_config_int(cfg, "model", "n_kv_head");
    if (*kv == 0) *kv = n_head;
    if (n_head % *kv != 0)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s: [model] n_kv_head = %lld does not divide n_head = %lld: each key/value head "
                               "serves n_head / n_kv_head query heads (allowed: a divisor of %lld; 1 is multi-query)",
                               key_where(cfg, "n_kv_head", "n_head"), (long long)*kv, (long long)n_head,
                               (long long)n_head);
    const int64_t given = plait_config_int(cfg, "model", "head_dim");
    const int64_t HS = given ? given : n_embd / n_head;
    if (HS % 2 != 0 || HS > PLAIT_ATTENTION_FUSED_MAX_HS)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s: [model] %s = %lld: the llama arch's head size must be even (rotary positions "
                               "rotate pairs) and at most %d (its fused attention)",
                               key_where(cfg, given ? "head_dim" : "n_embd", given ? NULL : "n_head"),
                               given ? "head_dim" : "n_embd / n_head", (long long)HS, PLAIT_ATTENTION_FUSED_MAX_HS);
    *hs = HS;
    if (plait_config_float(cfg, "model", "rope_theta") <= 0)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "[model] rope_theta = %g: it must be above 0",
                               plait_config_float(cfg, "model", "rope_theta"));
    plait_status st = check_rope_scaling(cfg);
    if (st != PLAIT_OK) return st;
    *ffn = plait_config_int(cfg, "model", "ffn_hidden");
    if (*ffn == 0)
        *ffn = llama_ffn_hidden(n_embd, plait_config_float(cfg, "model", "ffn_multiplier"),
                                plait_config_int(cfg, "model", "multiple_of"));
    return PLAIT_OK;
}

/* [model] `key` = v refused for being more than `bound` = max. */
static plait_status over(const plait_config *cfg, const char *key, int64_t v, const char *bound, int64_t max,
                         const char *why) {
    return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                           "%s: [model] %s = %lld is more than %s = %lld: %s (allowed: 1 to %lld)",
                           key_where(cfg, key, bound), key, (long long)v, bound, (long long)max, why, (long long)max);
}

/* The [model] moe_* keys together: none on a dense model (they would be
 * ignored in silence), what the router and the blocks allow. */
static plait_status check_moe(const plait_config *cfg, const char *arch, int64_t n_layer, int64_t dense_ffn,
                              moe_desc *out) {
    static const char *const keys[] = {"moe_top_k",  "moe_shared_experts", "moe_ffn_hidden",
                                       "moe_every",  "moe_router",         "moe_aux_loss",
                                       "moe_z_loss", "moe_bias_rate",      "moe_capacity",
                                       NULL};
    memset(out, 0, sizeof *out);
    const int64_t E = plait_config_int(cfg, "model", "moe_experts");
    const char *where = NULL;
    plait_config_origin(cfg, "model", "moe_experts", &where);
    where = where ? where : "config";
    if (E == 0) {
        for (int i = 0; keys[i]; i++) {
            const char *at = NULL;
            if (plait_config_origin(cfg, "model", keys[i], &at) == PLAIT_ORIGIN_DEFAULT) continue;
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                                   "%s: [model] %s configures a mixture of experts, and this model has none "
                                   "(moe_experts = 0): remove it, or set moe_experts to 2 or more",
                                   at ? at : "config", keys[i]);
        }
        return PLAIT_OK;
    }
    if (strcmp(arch, "gpt") != 0 && strcmp(arch, "llama") != 0)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s: [model] moe_experts = %lld: arch = %s has no MLP to make sparse (allowed: arch = "
                               "gpt or llama, or moe_experts = 0)",
                               where, (long long)E, arch);
    if (E < 2)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s: [model] moe_experts = 1 routes every token to one expert, a dense MLP: set 2 or "
                               "more, or 0 for a dense model",
                               where);
    const int64_t k = plait_config_int(cfg, "model", "moe_top_k"), every = plait_config_int(cfg, "model", "moe_every");
    if (k > E) return over(cfg, "moe_top_k", k, "moe_experts", E, "each token goes to k different experts");
    if (every > n_layer) return over(cfg, "moe_every", every, "n_layer", n_layer, "no block would be sparse");
    out->experts = (int32_t)E;
    out->top_k = (int32_t)k;
    out->shared = (int32_t)plait_config_int(cfg, "model", "moe_shared_experts");
    out->ffn = (int32_t)plait_config_int(cfg, "model", "moe_ffn_hidden");
    if (out->ffn == 0) out->ffn = (int32_t)dense_ffn;
    out->every = (int32_t)every;
    out->sigmoid = strcmp(plait_config_str(cfg, "model", "moe_router"), "sigmoid") == 0;
    out->aux = plait_config_float(cfg, "model", "moe_aux_loss");
    out->z = plait_config_float(cfg, "model", "moe_z_loss");
    out->bias_rate = plait_config_float(cfg, "model", "moe_bias_rate");
    out->capacity = plait_config_float(cfg, "model", "moe_capacity");
    return PLAIT_OK;
}

/* The llama arch's own keys on another model would be ignored in silence
 * (a gpt with n_kv_head = 2 is not grouped-query): refused, naming where. */
static plait_status refuse_llama_keys(const plait_config *cfg, const char *arch, int is_llama) {
    static const char *const llama_only[] = {"n_kv_head",
                                             "ffn_hidden",
                                             "multiple_of",
                                             "ffn_multiplier",
                                             "norm_eps",
                                             "rope_theta",
                                             "rope_scaling",
                                             "rope_factor",
                                             "rope_low_freq_factor",
                                             "rope_high_freq_factor",
                                             "rope_original_max_pos",
                                             "tie_embeddings",
                                             "qkv_bias",
                                             "head_dim",
                                             "qk_norm",
                                             NULL};
    for (int i = 0; !is_llama && llama_only[i]; i++) {
        const char *where = NULL;
        if (plait_config_origin(cfg, "model", llama_only[i], &where) == PLAIT_ORIGIN_DEFAULT) continue;
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s: [model] %s is a key of arch = llama, and this model is arch = %s, which has "
                               "no use for it (remove it, or set arch = llama)",
                               where ? where : "config", llama_only[i], arch);
    }
    return PLAIT_OK;
}

/* [model] recompute_offload = host, and where it was set (for its refusals). */
static int offload_set(const plait_config *cfg, const char **where) {
    *where = NULL;
    plait_config_origin(cfg, "model", "recompute_offload", where);
    if (!*where) *where = "config";
    return strcmp(plait_config_str(cfg, "model", "recompute_offload"), "host") == 0;
}

plait_status plait_model_check_recompute_offload(const plait_config *cfg, int own_memory, const char *device) {
    const char *where;
    if (own_memory || !offload_set(cfg, &where)) return PLAIT_OK;
    return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                           "%s: [model] recompute_offload = host moves the blocks' kept inputs from a device's memory "
                           "to the host's, and the %s device's memory is host memory already, so it would move "
                           "nothing: remove it (recompute_offload = none), or train on a GPU",
                           where, device[0] ? device : plait_config_str(cfg, "device", "plugin"));
}

plait_status plait_model_describe(const plait_config *cfg, int32_t micro_batch, plait_model_desc **out) {
    *out = NULL;
    const char *arch = plait_config_str(cfg, "model", "arch");
    int64_t n_layer = plait_config_int(cfg, "model", "n_layer");
    int64_t n_head = plait_config_int(cfg, "model", "n_head");
    int64_t n_embd = plait_config_int(cfg, "model", "n_embd");
    int64_t block_size = plait_config_int(cfg, "model", "block_size");
    int64_t vocab_size = plait_config_int(cfg, "model", "vocab_size");
    const int is_llama = strcmp(arch, "llama") == 0, is_gpt = strcmp(arch, "gpt") == 0;
    if (micro_batch < 1)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "model: micro-batch of %d sequences; it must be at least 1",
                               (int)micro_batch);
    /* a llama with head_dim has heads of their own size */
    if ((is_gpt || (is_llama && plait_config_int(cfg, "model", "head_dim") == 0)) && n_embd % n_head != 0)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s: [model] n_embd = %lld is not a multiple of n_head = %lld: "
                               "each head needs n_embd / n_head channels",
                               key_where(cfg, "n_embd", "n_head"), (long long)n_embd, (long long)n_head);
    plait_status kst = refuse_llama_keys(cfg, arch, is_llama);
    if (kst != PLAIT_OK) return kst;
    const char *rc = plait_config_str(cfg, "model", "recompute"), *where;
    if (offload_set(cfg, &where) && strcmp(rc, "full") != 0)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s: [model] recompute_offload = host moves the blocks' kept inputs of recompute = "
                               "full to host memory, and this model has recompute = %s, which keeps more than them: "
                               "set recompute = full, or recompute_offload = none",
                               where, rc);
    int64_t n_kv_head = 0, ffn_hidden = 0, head_dim = 0;
    if (is_llama) {
        plait_status st = check_llama(cfg, n_head, n_embd, &n_kv_head, &ffn_hidden, &head_dim);
        if (st != PLAIT_OK) return st;
    }
    moe_desc moe;
    plait_status mst = check_moe(cfg, arch, n_layer, is_llama ? ffn_hidden : 4 * n_embd, &moe);
    if (mst != PLAIT_OK) return mst;
    /* every index of the largest activation must fit int64 with room to spare */
    double act = (double)micro_batch * (double)block_size *
                 ((double)n_embd * 4.0 + (double)vocab_size + (double)n_head * (double)block_size);
    if (act > 4e12)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "[model] sizes too large: one micro-batch would need %.3g floats of "
                               "activations per layer",
                               act);

    plait_model_desc *d = calloc(1, sizeof *d);
    if (!d) return plait_set_error(PLAIT_ERR_NO_MEMORY, "model description: out of memory");
    d->is_gpt = is_gpt;
    d->is_llama = is_llama;
    d->n_kv_head = (int32_t)n_kv_head;
    d->ffn_hidden = (int32_t)ffn_hidden;
    d->head_dim = (int32_t)head_dim;
    d->norm_eps = (float)plait_config_float(cfg, "model", "norm_eps");
    d->init_std = plait_config_float(cfg, "model", "init_std");
    d->rope_theta = plait_config_float(cfg, "model", "rope_theta");
    if (is_llama && strcmp(plait_config_str(cfg, "model", "rope_scaling"), "llama3") == 0)
        d->rope_scaling =
            (plait_rope_scaling){.type = PLAIT_ROPE_SCALING_LLAMA3,
                                 .factor = plait_config_float(cfg, "model", "rope_factor"),
                                 .low_freq_factor = plait_config_float(cfg, "model", "rope_low_freq_factor"),
                                 .high_freq_factor = plait_config_float(cfg, "model", "rope_high_freq_factor"),
                                 .original_max_pos = plait_config_int(cfg, "model", "rope_original_max_pos")};
    d->tied = !is_llama || plait_config_bool(cfg, "model", "tie_embeddings");
    d->qkv_bias = is_llama && plait_config_bool(cfg, "model", "qkv_bias");
    d->qk_norm = is_llama && plait_config_bool(cfg, "model", "qk_norm");
    d->recompute = strcmp(rc, "full") == 0        ? PLAIT_RECOMPUTE_FULL
                   : strcmp(rc, "selective") == 0 ? PLAIT_RECOMPUTE_SELECTIVE
                                                  : PLAIT_RECOMPUTE_NONE;
    d->recompute_offload = strcmp(plait_config_str(cfg, "model", "recompute_offload"), "host") == 0;
    d->n_layer = (int32_t)n_layer;
    d->n_head = (int32_t)n_head;
    d->n_embd = (int32_t)n_embd;
    d->block_size = (int32_t)block_size;
    d->vocab_size = (int32_t)vocab_size;
    d->micro_batch = micro_batch;
    d->params_per_block = is_llama ? LP_COUNT + (d->qkv_bias ? LP_BIASES : 0) + (d->qk_norm ? LP_QK_NORMS : 0)
                          : is_gpt ? BP_COUNT
                                   : BP_MLP_COUNT;
    d->moe = moe;
    size_t max_params = 5 + (size_t)n_layer * (BP_COUNT + MOE_EXPERTS + 2 * MOE_GPT_TENSORS);
    d->moe_first = malloc((size_t)n_layer * sizeof *d->moe_first);
    /* -1 a dense block; 0 marks a sparse one for build(), which sets its
     * first MoE parameter's index (never 0: the embedding's) */
    for (int64_t l = 0; d->moe_first && l < n_layer; l++)
        d->moe_first[l] = moe.experts > 0 && (l + 1) % moe.every == 0 ? 0 : -1;
    d->layers = calloc((size_t)n_layer + 2, sizeof *d->layers);
    d->params = calloc(max_params, sizeof *d->params);
    d->names = calloc(max_params + (size_t)n_layer + 2, sizeof *d->names);
    if (!d->layers || !d->params || !d->names || !d->moe_first) {
        plait_model_desc_free(d);
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "model description: out of memory");
    }
    d->spec.struct_size = sizeof d->spec;
    d->spec.arch = is_llama ? "llama" : is_gpt ? "gpt" : "mlp";
    d->spec.n_layer = d->n_layer;
    d->spec.n_head = d->n_head;
    d->spec.n_embd = d->n_embd;
    d->spec.block_size = d->block_size;
    d->spec.vocab_size = d->vocab_size;
    d->spec.n_kv_head = is_llama ? d->n_kv_head : d->n_head;
    d->spec.ffn_hidden = is_llama ? d->ffn_hidden : 4 * d->n_embd;
    d->spec.micro_batch = micro_batch;
    d->spec.layers = d->layers;
    d->spec.params = d->params;
    plait_status st = name_layers(d);
    if (st == PLAIT_OK) st = is_llama ? build_llama(d) : build(d);
    if (st != PLAIT_OK) {
        plait_model_desc_free(d);
        return st;
    }
    *out = d;
    return PLAIT_OK;
}

const plait_model_spec *plait_model_desc_spec(const plait_model_desc *desc) { return &desc->spec; }

void plait_model_desc_free(plait_model_desc *d) {
    if (!d) return;
    for (int32_t i = 0; i < d->n_names; i++) free(d->names[i]);
    free(d->names);
    free(d->params);
    free(d->layers);
    free(d->moe_first);
    free(d);
}

double plait_model_param_active(const plait_model_desc *d, const plait_param *p) {
    if (d->moe.experts == 0 || p->layer < 1 || p->layer > d->n_layer || !desc_block_sparse(d, p->layer - 1)) return 1.0;
    const int32_t at = p->index - d->moe_first[p->layer - 1];
    const int32_t nt = d->is_llama ? MOE_LLAMA_TENSORS : MOE_GPT_TENSORS;
    if (at == MOE_BIAS) return 0.0;
    if (at >= MOE_EXPERTS && at < MOE_EXPERTS + nt) return (double)d->moe.top_k / (double)d->moe.experts;
    return 1.0;
}

int64_t plait_model_spec_head_size(const plait_model_spec *s) {
    if (strcmp(s->arch, "mlp") == 0 || s->n_head < 1) return s->n_embd;
    if (strcmp(s->arch, "llama") == 0)
        for (int32_t i = 0; i < s->n_params; i++) /* q_proj: n_head heads of head_dim rows */
            if (s->params[i].layer == 1 && strstr(s->params[i].name, ".self_attn.q_proj.weight"))
                return s->params[i].shape[0] / s->n_head;
    return s->n_embd / s->n_head;
}

int plait_model_spec_qk_norm(const plait_model_spec *s) {
    for (int32_t i = 0; i < s->n_params && s->params[i].layer <= 1; i++) /* in layer order: block 1's first */
        if (s->params[i].layer == 1 && strstr(s->params[i].name, ".self_attn.q_norm.weight")) return 1;
    return 0;
}

int32_t plait_model_param_index(const plait_model_desc *desc, const char *name) {
    for (int32_t i = 0; i < desc->spec.n_params; i++)
        if (strcmp(desc->params[i].name, name) == 0) return i;
    return -1;
}

double plait_model_spec_params(const plait_model_spec *s) {
    double n = 0;
    for (int32_t g = 0; g < s->n_params; g++) {
        if (plait_tied_is_copy(&s->params[g])) continue;
        double e = 1;
        for (int d = 0; d < s->params[g].ndim; d++) e *= (double)s->params[g].shape[d];
        n += e;
    }
    return n;
}
