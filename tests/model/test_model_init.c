/*
 * The description (names, shapes, roles, flags) and layout-independent
 * initialisation: every TP slice's initial values equal the matching slice
 * of the whole tensor's, padding is zero, partial fills agree with whole
 * fills, and the values follow GPT-2's scheme ([model] init_std scaling
 * it); an expert tensor's slice
 * at tp × ep, cut twice, too, and the norm counts each such slice once.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "kernels/kernels_pool.h"
#include "model/model.h"
#include "model/model_internal.h"

#include <plait/optim_util.h>

static plait_config *make_config(const char *ini) {
    char *const no_env[] = {NULL};
    plait_config *cfg = plait_config_new();
    assert_non_null(cfg);
    assert_int_equal(plait_config_declare_core(cfg), PLAIT_OK);
    assert_int_equal(plait_config_load_string(cfg, "test.ini", ini), PLAIT_OK);
    assert_int_equal(plait_config_finalize(cfg, no_env), PLAIT_OK);
    return cfg;
}

static const char *GPT_INI = "[run]\nseed = 7\n[model]\nn_layer = 3\nn_head = 4\nn_embd = 8\n"
                             "block_size = 5\nvocab_size = 37\n";

static void test_description(void **state) {
    (void)state;
    plait_config *cfg = make_config(GPT_INI);
    plait_model_desc *d;
    assert_int_equal(plait_model_describe(cfg, 2, &d), PLAIT_OK);
    const plait_model_spec *s = plait_model_desc_spec(d);
    assert_string_equal(s->arch, "gpt");
    assert_int_equal(s->n_layers, 5);
    assert_string_equal(s->layers[0].name, "embedding");
    assert_string_equal(s->layers[2].name, "h.1");
    assert_string_equal(s->layers[4].name, "head");
    assert_int_equal(s->n_params, 2 + 3 * 12 + 3);
    const plait_param *p = &s->params[plait_model_param_index(d, "transformer.h.1.attn.c_attn.weight")];
    assert_int_equal(p->shape[0], 24);
    assert_int_equal(p->shape[1], 8);
    assert_int_equal(p->tp_role, PLAIT_TP_COLUMN);
    assert_int_equal(p->shard.groups, 3);
    assert_int_equal(p->shard.dim, 0);
    assert_int_equal(p->layer, 2);
    assert_int_equal(p->flags, 0);
    p = &s->params[plait_model_param_index(d, "transformer.h.2.mlp.c_proj.weight")];
    assert_int_equal(p->tp_role, PLAIT_TP_ROW);
    assert_int_equal(p->shape[0], 8);
    assert_int_equal(p->shape[1], 32);
    p = &s->params[plait_model_param_index(d, "transformer.h.2.mlp.c_proj.bias")];
    assert_int_equal(p->tp_role, PLAIT_TP_REPLICATE);
    assert_int_equal(p->flags, PLAIT_PARAM_NO_DECAY);
    p = &s->params[plait_model_param_index(d, "transformer.ln_f.weight")];
    assert_int_equal(p->flags, PLAIT_PARAM_NO_DECAY);
    int32_t head = plait_model_param_index(d, "lm_head.weight");
    assert_int_equal(head, s->n_params - 1);
    assert_int_equal(s->params[head].flags, PLAIT_PARAM_TIED_COPY);
    assert_int_equal(s->params[head].tied_to, plait_model_param_index(d, "transformer.wte.weight"));
    assert_int_equal(s->params[head].tp_role, PLAIT_TP_VOCAB);
    assert_int_equal(s->params[head].layer, 4);
    size_t total = 0;
    for (int32_t i = 0; i < s->n_params; i++) {
        assert_int_equal(s->params[i].index, i);
        if (i != head) total += s->params[i].numel;
        const plait_layer *ly = &s->layers[s->params[i].layer];
        assert_true(i >= ly->first_param && i < ly->first_param + ly->n_params);
    }
    assert_int_equal(s->total_numel, total);
    assert_int_equal(plait_model_param_index(d, "nope"), -1);
    assert_true(s->layers[1].flops_per_token > s->layers[0].flops_per_token);
    assert_true(s->layers[1].activation_bytes > 0);
    plait_model_desc_free(d);
    plait_config_free(cfg);

    /* mlp arch: blocks without attention */
    cfg = make_config("[model]\narch = mlp\nn_layer = 2\nn_embd = 8\n");
    assert_int_equal(plait_model_describe(cfg, 1, &d), PLAIT_OK);
    s = plait_model_desc_spec(d);
    assert_string_equal(s->arch, "mlp");
    assert_int_equal(s->n_params, 2 + 2 * 6 + 3);
    assert_int_equal(plait_model_param_index(d, "transformer.h.0.attn.c_attn.weight"), -1);
    assert_true(plait_model_param_index(d, "transformer.h.1.mlp.c_fc.weight") >= 0);
    plait_model_desc_free(d);
    plait_config_free(cfg);

    /* a bad combination is one clear message */
    cfg = make_config("[model]\nn_head = 3\nn_embd = 8\n");
    assert_int_equal(plait_model_describe(cfg, 1, &d), PLAIT_ERR_INVALID_CONFIG);
    plait_config_free(cfg);
}

static float *init_whole(const plait_init_rule *rule, const plait_param *g) {
    plait_param p = *g;
    plait_shard whole = {-1, 1, 0, 1, 0};
    assert_int_equal(plait_param_apply_shard(&p, &whole), PLAIT_OK);
    float *v = malloc(p.numel * sizeof(float));
    assert_non_null(v);
    assert_int_equal(plait_model_init_values(rule, &p, 0, p.numel, v), PLAIT_OK);
    return v;
}

/* A tensor of several of the pool's ranges (the embedding, 1000 x 256)
 * takes the same values drawn by 1 thread and by 3, and each equals the
 * value drawn alone, at the ranges' edges too. */
static void test_threads_and_ranges(void **state) {
    (void)state;
    plait_config *cfg = make_config("[run]\nseed = 11\n[model]\nn_layer = 1\nn_head = 4\n"
                                    "n_embd = 256\nblock_size = 8\nvocab_size = 1000\n");
    plait_model_desc *d;
    assert_int_equal(plait_model_describe(cfg, 1, &d), PLAIT_OK);
    const plait_init_rule rule = plait_model_init_rule(d, 11);
    const plait_model_spec *s = plait_model_desc_spec(d);
    const plait_param *g = &s->params[plait_model_param_index(d, "transformer.wte.weight")];
    plait_pool_set_threads(1);
    float *one = init_whole(&rule, g);
    plait_pool_set_threads(3);
    assert_int_equal(plait_pool_threads(), 3);
    float *three = init_whole(&rule, g);
    plait_pool_set_threads(1);
    const size_t n = 1000 * 256;
    assert_memory_equal(one, three, n * sizeof(float));
    plait_param p = *g;
    plait_shard whole = {-1, 1, 0, 1, 0};
    assert_int_equal(plait_param_apply_shard(&p, &whole), PLAIT_OK);
    const size_t at[] = {0, 65535, 65536, 65537, 131071, 131072, 196608, n - 1};
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
        float x;
        assert_int_equal(plait_model_init_values(&rule, &p, at[i], 1, &x), PLAIT_OK);
        assert_memory_equal(&x, &three[at[i]], sizeof x);
    }
    assert_true(one[0] != one[1] && fabsf(one[n - 1]) < 0.2f);
    free(one);
    free(three);
    plait_model_desc_free(d);
    plait_config_free(cfg);
}

/* Slices for tp = 2, 3, 4 (37 rows of vocabulary: padded) equal the whole. */
static void test_layout_independent(void **state) {
    (void)state;
    plait_config *cfg = make_config("[run]\nseed = 7\n[model]\nn_layer = 2\nn_head = 12\n"
                                    "n_embd = 24\nblock_size = 5\nvocab_size = 37\n");
    plait_model_desc *d;
    assert_int_equal(plait_model_describe(cfg, 2, &d), PLAIT_OK);
    const plait_init_rule rule = plait_model_init_rule(d, (uint64_t)plait_config_int(cfg, "run", "seed"));
    const plait_model_spec *s = plait_model_desc_spec(d);
    for (int32_t i = 0; i < s->n_params; i++) {
        const plait_param *g = &s->params[i];
        float *whole = init_whole(&rule, g);
        for (int32_t tp = 2; tp <= 4; tp++) {
            if (g->tp_role == PLAIT_TP_REPLICATE) continue;
            int64_t padded = g->tp_role == PLAIT_TP_VOCAB ? (g->shape[0] + tp - 1) / tp * tp
                                                          : g->shape[g->shard.dim];
            for (int32_t r = 0; r < tp; r++) {
                plait_param p = *g;
                plait_shard sh = g->shard;
                sh.parts = tp;
                sh.index = r;
                sh.padded_len = padded;
                assert_int_equal(plait_param_apply_shard(&p, &sh), PLAIT_OK);
                float *v = malloc(p.numel * sizeof(float));
                assert_non_null(v);
                /* filled in pieces of 7 elements: offsets must not matter */
                for (size_t o = 0; o < p.numel; o += 7)
                    assert_int_equal(plait_model_init_values(&rule, &p, o, p.numel - o < 7 ? p.numel - o : 7,
                                                             v + o),
                                     PLAIT_OK);
                int64_t rows = p.local_shape[0], cols = p.ndim > 1 ? p.local_shape[1] : 1;
                int64_t gcols = p.ndim > 1 ? g->shape[1] : 1;
                for (int64_t a = 0; a < rows; a++)
                    for (int64_t b = 0; b < cols; b++) {
                        float got = v[a * cols + b];
                        int64_t ga = a, gb = b;
                        if (sh.dim == 0) { /* groups of rows, slice r of each */
                            int64_t glen = padded / sh.groups, plen = glen / tp;
                            ga = (a / plen) * glen + r * plen + a % plen;
                        } else {
                            gb = r * (g->shape[1] / tp) + b;
                        }
                        if (ga >= g->shape[0])
                            assert_true(got == 0.0f); /* vocabulary padding */
                        else
                            assert_true(got == whole[ga * gcols + gb]);
                    }
                free(v);
            }
        }
        free(whole);
    }
    /* out-of-range requests fail */
    plait_param p = s->params[0];
    float x;
    assert_int_equal(plait_model_init_values(&rule, &p, p.numel, 1, &x), PLAIT_ERR_INVALID_ARG);
    plait_model_desc_free(d);
    plait_config_free(cfg);
}

static double stddev(const float *v, size_t n) {
    double s = 0, s2 = 0;
    for (size_t i = 0; i < n; i++) s += v[i], s2 += (double)v[i] * v[i];
    return sqrt(s2 / (double)n - (s / (double)n) * (s / (double)n));
}

static void test_gpt2_scheme(void **state) {
    (void)state;
    plait_config *cfg = make_config("[run]\nseed = 11\n[model]\nn_layer = 8\nn_head = 4\n"
                                    "n_embd = 64\nblock_size = 64\nvocab_size = 256\n");
    plait_model_desc *d;
    assert_int_equal(plait_model_describe(cfg, 1, &d), PLAIT_OK);
    const plait_init_rule rule = plait_model_init_rule(d, (uint64_t)plait_config_int(cfg, "run", "seed"));
    const plait_model_spec *s = plait_model_desc_spec(d);
    int32_t wte = plait_model_param_index(d, "transformer.wte.weight");
    int32_t head = plait_model_param_index(d, "lm_head.weight");
    int32_t fc = plait_model_param_index(d, "transformer.h.3.mlp.c_fc.weight");
    int32_t proj = plait_model_param_index(d, "transformer.h.3.mlp.c_proj.weight");
    int32_t aproj = plait_model_param_index(d, "transformer.h.0.attn.c_proj.weight");
    int32_t ln = plait_model_param_index(d, "transformer.h.3.ln_1.weight");
    int32_t bias = plait_model_param_index(d, "transformer.h.3.attn.c_attn.bias");
    float *v_wte = init_whole(&rule, &s->params[wte]), *v_head = init_whole(&rule, &s->params[head]);
    assert_memory_equal(v_wte, v_head, s->params[wte].numel * sizeof(float));
    assert_true(fabs(stddev(v_wte, s->params[wte].numel) - 0.02) < 0.001);
    float *v_fc = init_whole(&rule, &s->params[fc]);
    assert_true(fabs(stddev(v_fc, s->params[fc].numel) - 0.02) < 0.001);
    assert_true(memcmp(v_fc, v_wte, 64 * sizeof(float)) != 0); /* names give different streams */
    float *v_proj = init_whole(&rule, &s->params[proj]), *v_aproj = init_whole(&rule, &s->params[aproj]);
    double want = 0.02 / sqrt(16.0);
    assert_true(fabs(stddev(v_proj, s->params[proj].numel) - want) < 0.05 * want);
    assert_true(fabs(stddev(v_aproj, s->params[aproj].numel) - want) < 0.05 * want);
    float *v_ln = init_whole(&rule, &s->params[ln]), *v_bias = init_whole(&rule, &s->params[bias]);
    for (size_t i = 0; i < s->params[ln].numel; i++) assert_true(v_ln[i] == 1.0f);
    for (size_t i = 0; i < s->params[bias].numel; i++) assert_true(v_bias[i] == 0.0f);
    /* another seed, other values */
    plait_init_rule seed12 = rule;
    seed12.seed = 12;
    float *v_fc2 = init_whole(&seed12, &s->params[fc]);
    assert_true(memcmp(v_fc, v_fc2, s->params[fc].numel * sizeof(float)) != 0);
    plait_init_rule seed11 = rule;
    seed11.seed = 11;
    float *v_fc3 = init_whole(&seed11, &s->params[fc]);
    assert_memory_equal(v_fc, v_fc3, s->params[fc].numel * sizeof(float));
    /* [model] init_std: every normal draw scaled, the norms and biases not */
    plait_model_desc *d6;
    plait_config *cfg6 = make_config("[run]\nseed = 11\n[model]\nn_layer = 8\nn_head = 4\n"
                                     "n_embd = 64\nblock_size = 64\nvocab_size = 256\ninit_std = 0.006\n");
    assert_int_equal(plait_model_describe(cfg6, 1, &d6), PLAIT_OK);
    const plait_init_rule rule6 = plait_model_init_rule(d6, 11);
    float *v_fc6 = init_whole(&rule6, &s->params[fc]), *v_proj6 = init_whole(&rule6, &s->params[proj]);
    for (size_t i = 0; i < s->params[fc].numel; i++) assert_float_equal(v_fc6[i], v_fc[i] * 0.3f, 1e-7);
    assert_true(fabs(stddev(v_proj6, s->params[proj].numel) - 0.006 / sqrt(16.0)) < 0.05 * 0.006 / sqrt(16.0));
    float *v_ln6 = init_whole(&rule6, &s->params[ln]);
    for (size_t i = 0; i < s->params[ln].numel; i++) assert_true(v_ln6[i] == 1.0f);
    free(v_fc6);
    free(v_proj6);
    free(v_ln6);
    plait_model_desc_free(d6);
    plait_config_free(cfg6);
    free(v_wte);
    free(v_head);
    free(v_fc);
    free(v_fc2);
    free(v_fc3);
    free(v_proj);
    free(v_aproj);
    free(v_ln);
    free(v_bias);
    plait_model_desc_free(d);
    plait_config_free(cfg);
}

static void test_bad_shards(void **state) {
    (void)state;
    plait_config *cfg = make_config(GPT_INI);
    plait_model_desc *d;
    assert_int_equal(plait_model_describe(cfg, 1, &d), PLAIT_OK);
    plait_param p = plait_model_desc_spec(d)->params[plait_model_param_index(d, "transformer.h.0.attn.c_attn.weight")];
    plait_shard bad_div = {0, 5, 0, 3, 24};  /* 24 rows in 3 groups cannot be cut 5 ways */
    plait_shard bad_dim = {2, 2, 0, 1, 8};   /* a 2-D tensor has no dimension 2 */
    plait_shard bad_index = {0, 2, 2, 3, 24};
    plait_shard short_pad = {0, 2, 0, 1, 20};
    assert_int_equal(plait_param_apply_shard(&p, &bad_div), PLAIT_ERR_INVALID_ARG);
    assert_int_equal(plait_param_apply_shard(&p, &bad_dim), PLAIT_ERR_INVALID_ARG);
    assert_int_equal(plait_param_apply_shard(&p, &bad_index), PLAIT_ERR_INVALID_ARG);
    assert_int_equal(plait_param_apply_shard(&p, &short_pad), PLAIT_ERR_INVALID_ARG);
    plait_shard ok = {0, 4, 3, 3, 24};
    assert_int_equal(plait_param_apply_shard(&p, &ok), PLAIT_OK);
    assert_int_equal(p.local_shape[0], 6);
    assert_int_equal(p.local_shape[1], 8);
    assert_int_equal(p.numel, 48);
    plait_model_desc_free(d);
    plait_config_free(cfg);
}

/* tp 2 × ep 2: an expert tensor [E, out, in] cut over ep on dimension 0,
 * then each expert's width over tp (the plan's second split): the four
 * slices' initial values are the whole tensor's at the places the two
 * splits give, every element held once, and the gradient norm counts
 * every slice once (on each tp rank of the first ep ranks). */
static void test_expert_slices_twice(void **state) {
    (void)state;
    plait_config *cfg = make_config("[run]\nseed = 7\n[model]\nn_layer = 1\nn_head = 2\nn_embd = 8\n"
                                    "block_size = 5\nvocab_size = 37\nmoe_experts = 4\nmoe_top_k = 2\n"
                                    "moe_ffn_hidden = 6\n");
    plait_model_desc *d;
    assert_int_equal(plait_model_describe(cfg, 1, &d), PLAIT_OK);
    const plait_model_spec *s = plait_model_desc_spec(d);
    plait_shard *second = calloc((size_t)s->n_params, sizeof *second);
    assert_non_null(second);
    plait_init_rule rule = plait_model_init_rule(d, 7);
    rule.second = second;
    rule.n_second = s->n_params;
    const int ep = 2, tp = 2;
    int experts_seen = 0;
    for (int32_t i = 0; i < s->n_params; i++) {
        const plait_param *g = &s->params[i];
        if (!(g->flags & PLAIT_PARAM_EXPERT) || g->tp_role == PLAIT_TP_REPLICATE) continue;
        experts_seen++;
        float *whole = init_whole(&rule, g);
        size_t n = 1;
        for (int k = 0; k < g->ndim; k++) n *= (size_t)g->shape[k];
        int *held = calloc(n, sizeof *held);
        assert_non_null(held);
        const int cut = g->shard.dim; /* 1 (column) or 2 (row) */
        for (int e = 0; e < ep; e++)
            for (int t = 0; t < tp; t++) {
                plait_param p = *g;
                plait_shard first = {.dim = 0, .parts = ep, .index = e, .groups = 1, .padded_len = g->shape[0]};
                second[i] =
                    (plait_shard){.dim = cut, .parts = tp, .index = t, .groups = 1, .padded_len = g->shape[cut]};
                assert_int_equal(plait_param_apply_shard(&p, &first), PLAIT_OK);
                assert_int_equal(plait_param_apply_second(&p, &second[i]), PLAIT_OK);
                assert_true(plait_param_split_twice(&p));
                assert_int_equal(p.shard.dim, 0); /* the first split stays the shard */
                assert_int_equal(p.numel, n / (size_t)(ep * tp));
                float *v = malloc(p.numel * sizeof(float));
                assert_non_null(v);
                for (size_t o = 0; o < p.numel; o += 5)
                    assert_int_equal(plait_model_init_values(&rule, &p, o, p.numel - o < 5 ? p.numel - o : 5, v + o),
                                     PLAIT_OK);
                /* the place of each local element, from the shapes alone */
                int64_t l1 = p.local_shape[1], l2 = g->ndim > 2 ? p.local_shape[2] : 1;
                int64_t s1 = g->shape[1], s2 = g->ndim > 2 ? g->shape[2] : 1;
                for (size_t k = 0; k < p.numel; k++) {
                    int64_t a = (int64_t)k / (l1 * l2), b = (int64_t)k / l2 % l1, c = (int64_t)k % l2;
                    a += e * p.local_shape[0];
                    if (cut == 1) b += t * l1;
                    else c += t * l2;
                    size_t at = (size_t)((a * s1 + b) * s2 + c);
                    assert_true(v[k] == whole[at]);
                    held[at]++;
                }
                /* the norm: each slice once, on every tp rank of the first ep
                 * ranks (of the dp x cp ranks holding it, e and e + ep) */
                for (int32_t dp_rank = e; dp_rank < 2 * ep; dp_rank += ep) {
                    plait_optim_topology topo = {.dp_rank = dp_rank, .tp = tp, .tp_rank = t, .ep = ep};
                    assert_int_equal(plait_optim_counts_in_norm(&topo, &p), dp_rank == e);
                }
                free(v);
            }
        for (size_t k = 0; k < n; k++) assert_int_equal(held[k], 1);
        second[i] = (plait_shard){.dim = -1, .parts = 1, .groups = 1};
        free(held);
        free(whole);
    }
    assert_true(experts_seen >= 2); /* c_fc and c_proj's weights, c_fc's bias */
    /* a second split of dimension 0, or without a first one there, is refused */
    const plait_param *g = NULL;
    for (int32_t i = 0; i < s->n_params && !g; i++)
        if ((s->params[i].flags & PLAIT_PARAM_EXPERT) && s->params[i].ndim == 3) g = &s->params[i];
    assert_non_null(g);
    plait_param p = *g;
    plait_shard whole = {-1, 1, 0, 1, 0},
                on0 = {.dim = 0, .parts = 2, .index = 0, .groups = 1, .padded_len = g->shape[0]};
    plait_shard on1 = {.dim = 1, .parts = 2, .index = 0, .groups = 1, .padded_len = g->shape[1]};
    assert_int_equal(plait_param_apply_shard(&p, &whole), PLAIT_OK);
    assert_int_equal(plait_param_apply_second(&p, &on1), PLAIT_ERR_INVALID_ARG);
    assert_int_equal(plait_param_apply_shard(&p, &on0), PLAIT_OK);
    assert_int_equal(plait_param_apply_second(&p, &on0), PLAIT_ERR_INVALID_ARG);
    assert_false(plait_param_split_twice(&p));
    free(second);
    plait_model_desc_free(d);
    plait_config_free(cfg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_description),         cmocka_unit_test(test_layout_independent),
        cmocka_unit_test(test_expert_slices_twice), cmocka_unit_test(test_gpt2_scheme),
        cmocka_unit_test(test_bad_shards),          cmocka_unit_test(test_threads_and_ranges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
