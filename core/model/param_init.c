/*
 * Layout-independent initial values (GPT-2 / nanoGPT scheme): every element
 * is a pure function of (seed, parameter name, global element index), drawn
 * from a counter-based generator (splitmix64 over the index) and turned
 * into a normal deviate by Box-Muller in double precision. Any TP, PP or
 * ZeRO-3 slice therefore reproduces exactly the values one process gets.
 *
 *   linear and embedding weights   N(0, σ), σ = [model] init_std (0.02)
 *   *.c_proj.weight (residual)     N(0, σ / sqrt(2·n_layer))
 *   LayerNorm weights              1
 *   biases                         0
 *   lm_head.weight (tied copy)     the values of transformer.wte.weight
 *   *.expert_bias (MoE routers)    0
 *
 * The llama arch's names (Hugging Face's) follow the same scheme: its
 * RMSNorm weights (*norm.weight) 1, the residual projections (o_proj,
 * down_proj) N(0, σ / sqrt(2·n_layer)), the rest N(0, σ); a tied
 * lm_head the values of model.embed_tokens.weight, an untied one values
 * of its own.
 */
#include <math.h>
#include <string.h>

#include "kernels/kernels_pool.h"
#include "model/model_internal.h"
#include "runtime/error.h"
#include "runtime/hash.h"

plait_init_rule plait_model_init_rule(const plait_model_desc *desc, uint64_t seed) {
    return (plait_init_rule){
        .seed = seed, .n_layer = desc->n_layer, .std = desc->init_std, .llama = desc->is_llama, .tied = desc->tied};
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

enum init_kind { INIT_ZERO, INIT_ONE, INIT_NORMAL };

static enum init_kind init_kind_of(const char *name, const plait_init_rule *rule, double *std, const char **hash_name) {
    const double base = rule->std > 0 ? rule->std : 0.02;
    const double residual = base / sqrt(2.0 * (double)(rule->n_layer > 0 ? rule->n_layer : 1));
    *hash_name = name;
    *std = base;
    if (ends_with(name, ".expert_bias")) return INIT_ZERO; /* a router's selection bias (moe.c) starts neutral */
    if (rule->llama) {
        if (strcmp(name, "lm_head.weight") == 0 && rule->tied) *hash_name = "model.embed_tokens.weight";
        if (ends_with(name, "norm.weight")) return INIT_ONE;
        if (ends_with(name, "o_proj.weight") || ends_with(name, "down_proj.weight")) *std = residual;
        return INIT_NORMAL;
    }
    if (strcmp(name, "lm_head.weight") == 0) *hash_name = "transformer.wte.weight";
    if (ends_with(name, ".bias")) return INIT_ZERO;
    if (strstr(name, ".ln_") && ends_with(name, ".weight")) return INIT_ONE;
    if (ends_with(name, "c_proj.weight")) *std = residual;
    return INIT_NORMAL;
}

/* Standard normal deviate number `index` of stream `key`. */
static double normal_at(uint64_t key, uint64_t index) {
    uint64_t r = plait_mix64(key + (index + 1) * 0x9e3779b97f4a7c15ull);
    double u1 = ((double)(r >> 32) + 0.5) * (1.0 / 4294967296.0); /* (0, 1) */
    double u2 = (double)(r & 0xffffffffu) * (1.0 / 4294967296.0);  /* [0, 1) */
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* One init_values call's elements, cut into ranges the pool's threads
 * draw: every element is a pure function of its global index, so the
 * values are the same however many threads drew them. */
typedef struct init_job {
    const plait_param *param;
    const plait_shard *second;
    size_t offset;
    float *dst;
    enum init_kind kind;
    double std;
    uint64_t key;
} init_job;

static void init_range(void *ctx, int64_t lo, int64_t hi) {
    const init_job *j = ctx;
    for (int64_t i = lo; i < hi; i++) {
        const size_t at = j->offset + (size_t)i;
        int64_t g = j->second ? plait_shard_global_index_twice(j->param, j->second, at)
                              : plait_shard_global_index(j->param, at);
        if (g < 0 || j->kind == INIT_ZERO) j->dst[i] = 0.0f;
        else if (j->kind == INIT_ONE) j->dst[i] = 1.0f;
        else j->dst[i] = (float)(j->std * normal_at(j->key, (uint64_t)g));
    }
}

/* Elements a range of the pool's: a normal deviate costs ~50-100 ns (a
 * log, a cosine and a square root in double), so a range is well past a
 * hand-off's cost; a 1B-parameter model's values are ~1e9 of them, a minute
 * on one core. */
#define INIT_RANGE 65536

plait_status plait_model_init_values(const plait_init_rule *rule, const plait_param *param, size_t offset,
                                     size_t count, float *dst) {
    if (offset > param->numel || count > param->numel - offset)
        return plait_set_error(PLAIT_ERR_INVALID_ARG,
                               "init values of %s: elements [%zu, %zu) outside its %zu local "
                               "elements",
                               param->name, offset, offset + count, param->numel);
    init_job j = {.param = param, .offset = offset, .dst = dst};
    const char *hname;
    j.kind = init_kind_of(param->name, rule, &j.std, &hname);
    j.key = plait_mix64(rule->seed ^ plait_mix64(plait_fnv1a_str(hname)));
    j.second = rule->second && param->index >= 0 && param->index < rule->n_second ? &rule->second[param->index] : NULL;
    plait_pool_for((int64_t)count, INIT_RANGE, init_range, &j);
    return PLAIT_OK;
}
