/*
 * The pp plugin as the core sees it: loaded from the build's plugin
 * directory, configured through [parallel.pp], create() refusing bad
 * layouts with clear messages, plan() filling stages, chunks and this
 * stage's schedule, and finish_grads() summing the tied embedding gradient
 * between the first and last stage (two threads play the two ranks over a
 * fake embedding-group communicator).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <plait/parallel.h>
#include <plait/plugin.h>

#include "config/config.h"
#include "plugin/loader.h"
#include "runtime/error.h"
#include "runtime/memory.h"
#include "schedule.h"
#include "host/host_table.h"

/* ---- a fake embedding group ---------------------------------------------- */

typedef struct fake_group {
    pthread_barrier_t barrier;
    const float *send[2];
    size_t count[2];
} fake_group;

typedef struct fake_comm {
    fake_group *group;
    int rank;
    int calls;
    plait_coll_algo algo;
    char label[64];
    uint64_t bytes_sent;
} fake_comm;

static int fake_rank(const plait_comm *c) { return ((const fake_comm *)(const void *)c)->rank; }
static int fake_size(const plait_comm *c) { (void)c; return 2; }
static const char *fake_name(const plait_comm *c) { (void)c; return "embed"; }

/* Sum in rank order: element i = rank 0's + rank 1's. */
static plait_status fake_allreduce(plait_comm *comm, const void *send, void *recv, size_t count, plait_dtype dtype,
                                   plait_redop op, const plait_coll_opts *opts, plait_request **req) {
    fake_comm *fc = (fake_comm *)(void *)comm;
    if (dtype != PLAIT_F32 || op != PLAIT_SUM || req) return PLAIT_ERR_INVALID_ARG;
    fc->calls++;
    fc->algo = opts ? opts->algo : PLAIT_ALGO_AUTO;
    snprintf(fc->label, sizeof fc->label, "%s", opts && opts->label ? opts->label : "");
    fake_group *g = fc->group;
    g->send[fc->rank] = send;
    g->count[fc->rank] = count;
    pthread_barrier_wait(&g->barrier);
    plait_status st = g->count[0] == g->count[1] ? PLAIT_OK : PLAIT_ERR_PROTOCOL;
    float *sum = malloc(count * sizeof *sum);
    for (size_t i = 0; st == PLAIT_OK && i < count; i++) sum[i] = g->send[0][i] + g->send[1][i];
    pthread_barrier_wait(&g->barrier); /* both have read before either writes */
    if (st == PLAIT_OK) memcpy(recv, sum, count * sizeof *sum);
    free(sum);
    fc->bytes_sent += count * sizeof(float);
    return st;
}

static void fake_stats(const plait_comm *comm, plait_comm_stats *out) {
    out->bytes_sent = ((const fake_comm *)(const void *)comm)->bytes_sent;
}

static const plait_coll_api fake_coll = {
    .struct_size = sizeof(plait_coll_api),
    .rank = fake_rank,
    .size = fake_size,
    .name = fake_name,
    .allreduce = fake_allreduce,
    .stats = fake_stats,
};

/* ---- a small GPT description --------------------------------------------- */

enum { N_BLOCKS = 6, N_LAYERS = N_BLOCKS + 2, VOCAB = 16, EMBD = 4, N_PARAMS = 3 + N_BLOCKS + 1 };

typedef struct gpt {
    plait_layer layers[N_LAYERS];
    plait_param params[N_PARAMS];
    plait_model_spec spec;
    char names[N_PARAMS][48];
} gpt;

static void param(gpt *g, int i, const char *name, int layer, int64_t d0, int64_t d1) {
    plait_param *p = &g->params[i];
    snprintf(g->names[i], sizeof g->names[i], "%s", name);
    *p = (plait_param){.struct_size = sizeof *p, .name = g->names[i], .index = i, .layer = layer,
                       .ndim = d1 ? 2 : 1, .shape = {d0, d1}, .shard = {.dim = -1, .parts = 1},
                       .local_shape = {d0, d1}, .numel = (size_t)(d0 * (d1 ? d1 : 1)), .tied_to = -1};
}

static void make_gpt(gpt *g) {
    memset(g, 0, sizeof *g);
    static const char *const layer_names[N_LAYERS] = {"embedding", "h.0", "h.1", "h.2", "h.3", "h.4", "h.5", "head"};
    for (int i = 0; i < N_LAYERS; i++)
        g->layers[i] = (plait_layer){.struct_size = sizeof(plait_layer), .name = layer_names[i], .index = i,
                                     .flops_per_token = i == 0 ? 0.5 : i == N_LAYERS - 1 ? 25 : 10};
    param(g, 0, "transformer.wte.weight", 0, VOCAB, EMBD);
    param(g, 1, "transformer.wpe.weight", 0, 8, EMBD);
    for (int b = 0; b < N_BLOCKS; b++) {
        char name[48];
        snprintf(name, sizeof name, "transformer.h.%d.mlp.c_fc.weight", b);
        param(g, 2 + b, name, 1 + b, EMBD, EMBD);
    }
    param(g, 2 + N_BLOCKS, "transformer.ln_f.weight", N_LAYERS - 1, EMBD, 0);
    param(g, 3 + N_BLOCKS, "lm_head.weight", N_LAYERS - 1, VOCAB, EMBD);
    g->params[3 + N_BLOCKS].flags = PLAIT_PARAM_TIED_COPY;
    g->params[3 + N_BLOCKS].tied_to = 0;
    int first = 0;
    for (int l = 0; l < N_LAYERS; l++) {
        int n = 0;
        for (int i = 0; i < N_PARAMS; i++) n += g->params[i].layer == l;
        g->layers[l].first_param = first;
        g->layers[l].n_params = n;
        first += n;
    }
    g->spec = (plait_model_spec){.struct_size = sizeof(plait_model_spec), .arch = "gpt", .n_layer = N_BLOCKS,
                                 .n_head = 2, .n_embd = EMBD, .block_size = 8, .vocab_size = VOCAB,
                                 .micro_batch = 1, .n_layers = N_LAYERS, .layers = g->layers,
                                 .n_params = N_PARAMS, .params = g->params};
}

/* ---- fixtures ------------------------------------------------------------ */

static const plait_plugin_desc *g_desc;
static const plait_parallel_ops *g_ops;
static gpt g_gpt;

/* The host handed to the plugin under test: the core's, with fake collectives. */
static plait_host g_test_host;

static int setup(void **state) {
    (void)state;
    plait_host_install();
    g_test_host = *plait_host_table();
    g_test_host.coll = &fake_coll; /* handed to the plugin through its init argument */
    g_desc = plait_plugin_load(PLAIT_KIND_PARALLEL, "pp");
    if (!g_desc) {
        fprintf(stderr, "cannot load the pp plugin: %s\n", plait_last_error());
        return -1;
    }
    g_ops = g_desc->ops;
    make_gpt(&g_gpt);
    return 0;
}

static plait_config *make_config(const char *ini) {
    plait_config *cfg = plait_config_new();
    assert_non_null(cfg);
    assert_int_equal(plait_config_declare_core(cfg), PLAIT_OK);
    assert_int_equal(plait_config_declare(cfg, "parallel.pp", g_desc->keys, g_desc->n_keys,
                                          g_desc->key_size, "plugin parallel/pp"),
                     PLAIT_OK);
    assert_int_equal(plait_config_load_string(cfg, "test.ini", ini), PLAIT_OK);
    char *envp[] = {NULL};
    if (plait_config_finalize(cfg, envp) != PLAIT_OK) fail_msg("config: %s", plait_last_error());
    return cfg;
}

static plait_mesh make_mesh(int pp, int stage, fake_comm *embed) {
    return (plait_mesh){.struct_size = sizeof(plait_mesh), .dp = 1, .tp = 1, .pp = pp, .pp_rank = stage,
                        .world_rank = stage, .world_size = pp, .embed_comm = (plait_comm *)(void *)embed,
                        .order = "tp,dp,pp"};
}

static plait_status create(const plait_config *cfg, const plait_mesh *mesh, int deterministic, void **st) {
    plait_parallel_init init = {.struct_size = sizeof init, .host = &g_test_host, .config = cfg,
                                .mesh = mesh, .model = &g_gpt.spec, .deterministic = deterministic};
    *st = NULL;
    return g_ops->create(&init, st);
}

typedef struct plan_buf {
    plait_plan plan;
    int32_t stage[N_LAYERS], chunk[N_LAYERS];
    plait_instr instr[1024];
} plan_buf;

static void prefill(plan_buf *b, int32_t m, size_t capacity) {
    memset(b, 0, sizeof *b);
    b->plan = (plait_plan){.struct_size = sizeof(plait_plan), .n_layers = N_LAYERS, .layer_stage = b->stage,
                           .layer_chunk = b->chunk, .chunks = 1, .vocab_padded = VOCAB, .micro_batches = m,
                           .schedule = b->instr, .capacity = capacity, .bubble_formula = -1};
}

static void expect_create_error(const char *ini, int pp, const char *needle) {
    plait_config *cfg = make_config(ini);
    plait_mesh mesh = make_mesh(pp, 0, NULL);
    void *st;
    plait_status s = create(cfg, &mesh, 0, &st);
    if (s != PLAIT_ERR_INVALID_CONFIG || !strstr(plait_last_error(), needle))
        fail_msg("[%s] pp=%d: status %d, message '%s', want '%s'", ini, pp, s, plait_last_error(), needle);
    assert_null(st);
    plait_config_free(cfg);
}

/* ---- tests --------------------------------------------------------------- */

static void test_descriptor(void **state) {
    (void)state;
    assert_string_equal(g_desc->name, "pp");
    assert_int_equal(g_desc->kind, PLAIT_KIND_PARALLEL);
    assert_int_equal(g_desc->n_keys, 3);
    assert_string_equal(g_desc->keys[0].key, "schedule");
    assert_string_equal(g_desc->keys[0].default_value, "1f1b");
    assert_non_null(g_ops->create);
    assert_non_null(g_ops->plan);
    assert_non_null(g_ops->finish_grads);
    assert_non_null(g_ops->destroy);
    assert_int_equal(g_ops->axes, PLAIT_PARALLEL_AXIS_PP);
}

static void test_create_errors(void **state) {
    (void)state;
    expect_create_error("[parallel.pp]\nschedule = interleaved\n", 4, "virtual_stages >= 2 (it is 1)");
    expect_create_error("[parallel.pp]\nschedule = 1f1b\nvirtual_stages = 2\n", 4,
                        "virtual_stages = 2 needs schedule = interleaved");
    expect_create_error("[parallel.pp]\nschedule = interleaved\nvirtual_stages = 3\n", 4,
                        "makes 12 model chunks, but the model has only 8 layers");
    expect_create_error("[parallel.pp]\nschedule = interleaved\nvirtual_stages = 2\n", 1, "needs [parallel] pp >= 2");
    expect_create_error("[parallel.pp]\nschedule = zb1\nvirtual_stages = 2\n", 4,
                        "virtual_stages = 2 needs schedule = interleaved (zb1 runs one model chunk per stage)");
    expect_create_error("[parallel.pp]\nstages = 0-2,4-6,7\n", 3, "[parallel.pp] stages: gap: layer 3 is in no stage");
    expect_create_error("[parallel.pp]\nstages = 0-3,4-7\n", 4, "2 ranges given, need pp x virtual_stages = 4");
    expect_create_error("[parallel.pp]\nstages = 0-3,4-8\n", 2, "goes past the last layer 7");
}

/* Default 1f1b on 4 stages: balanced partition, this stage's list. */
static void test_plan_1f1b(void **state) {
    (void)state;
    plait_config *cfg = make_config("[parallel]\npp = 4\n");
    for (int s = 0; s < 4; s++) {
        plait_mesh mesh = make_mesh(4, s, NULL);
        void *st;
        assert_int_equal(create(cfg, &mesh, 0, &st), PLAIT_OK);
        plan_buf b;
        /* Too little room: the needed count comes back. */
        prefill(&b, 8, 4);
        assert_int_equal(g_ops->plan(st, &b.plan), PLAIT_ERR_NO_MEMORY);
        size_t need = pp_schedule_length(PP_SCHEDULE_1F1B, 4, s, 8, 1);
        assert_int_equal(b.plan.n_instr, need);
        assert_non_null(strstr(plait_last_error(), "instructions"));
        prefill(&b, 8, need);
        assert_int_equal(g_ops->plan(st, &b.plan), PLAIT_OK);
        /* 0.5 | 10 x 6 | 25: the head alone, two blocks per other stage. */
        const int32_t want_stage[N_LAYERS] = {0, 0, 0, 1, 1, 2, 2, 3};
        assert_memory_equal(b.stage, want_stage, sizeof want_stage);
        for (int l = 0; l < N_LAYERS; l++) assert_int_equal(b.chunk[l], 0);
        assert_int_equal(b.plan.chunks, 1);
        plait_instr want[1024];
        size_t n;
        assert_int_equal(pp_schedule_build(PP_SCHEDULE_1F1B, 4, s, 8, 1, want, 1024, &n, NULL, 0), PLAIT_OK);
        assert_int_equal(b.plan.n_instr, n);
        assert_memory_equal(b.instr, want, n * sizeof(plait_instr));
        assert_float_equal(b.plan.bubble_formula, 3.0 / 11.0, 1e-12);
        assert_string_equal(b.plan.summary, "pp=4 1f1b m=8: bubble (p-1)/(m+p-1) = 27.3%");
        g_ops->destroy(st);
    }
    plait_config_free(cfg);
}

/* zb1: the ZB-H1 list with its own formula (a third of 1F1B's bubble). */
static void test_plan_zb1(void **state) {
    (void)state;
    plait_config *cfg = make_config("[parallel]\npp = 4\n[parallel.pp]\nschedule = zb1\n");
    plait_mesh mesh = make_mesh(4, 1, NULL);
    void *st;
    assert_int_equal(create(cfg, &mesh, 0, &st), PLAIT_OK);
    plan_buf b;
    prefill(&b, 8, 1024);
    assert_int_equal(g_ops->plan(st, &b.plan), PLAIT_OK);
    plait_instr want[1024];
    size_t n;
    assert_int_equal(pp_schedule_build(PP_SCHEDULE_ZB1, 4, 1, 8, 1, want, 1024, &n, NULL, 0), PLAIT_OK);
    assert_int_equal(b.plan.n_instr, n);
    assert_memory_equal(b.instr, want, n * sizeof(plait_instr));
    assert_float_equal(b.plan.bubble_formula, 3.0 / 27.0, 1e-12);
    assert_string_equal(b.plan.summary, "pp=4 zb1 m=8: bubble (p-1)/(3m+p-1) = 11.1%");
    g_ops->destroy(st);
    plait_config_free(cfg);
}

/* Interleaved, v = 2, fewer micro-batches than stages, explicit stages. */
static void test_plan_interleaved_explicit(void **state) {
    (void)state;
    plait_config *cfg = make_config("[parallel]\npp = 2\n[parallel.pp]\nschedule = interleaved\n"
                                    "virtual_stages = 2\nstages = 0-1, 2-4, 5, 6-7\n");
    plait_mesh mesh = make_mesh(2, 1, NULL);
    void *st;
    assert_int_equal(create(cfg, &mesh, 0, &st), PLAIT_OK);
    plan_buf b;
    prefill(&b, 1, 1024);
    assert_int_equal(g_ops->plan(st, &b.plan), PLAIT_OK);
    const int32_t want_stage[N_LAYERS] = {0, 0, 1, 1, 1, 0, 1, 1};
    const int32_t want_chunk[N_LAYERS] = {0, 0, 0, 0, 0, 1, 1, 1};
    assert_memory_equal(b.stage, want_stage, sizeof want_stage);
    assert_memory_equal(b.chunk, want_chunk, sizeof want_chunk);
    assert_int_equal(b.plan.chunks, 2);
    /* m = 1 < p = 2: I = (p-1) + (v-1)(p-m) = 2, bubble 2 / (1*2 + 2). */
    assert_float_equal(b.plan.bubble_formula, 0.5, 1e-12);
    assert_non_null(strstr(b.plan.summary, "pp=2 interleaved v=2 m=1: bubble (v*(p-m)+m-1)/(v*p+m-1) = 50.0%"));
    /* Stage 1's chunk 0 feeds stage 0's chunk 1 (wrap-around). */
    int saw_send = 0;
    for (size_t i = 0; i < b.plan.n_instr; i++)
        if (b.instr[i].op == PLAIT_INSTR_SEND_ACT) saw_send = b.instr[i].chunk == 0;
    assert_true(saw_send);
    g_ops->destroy(st);
    plait_config_free(cfg);
    /* Looped GPipe is accepted too. */
    cfg = make_config("[parallel]\npp = 2\n[parallel.pp]\nschedule = gpipe\nvirtual_stages = 2\n");
    assert_int_equal(create(cfg, &mesh, 0, &st), PLAIT_OK);
    prefill(&b, 4, 1024);
    assert_int_equal(g_ops->plan(st, &b.plan), PLAIT_OK);
    assert_string_equal(b.plan.summary, "pp=2 gpipe v=2 m=4: bubble (p-1)/(v*m+p-1) = 11.1%");
    g_ops->destroy(st);
    plait_config_free(cfg);
}

typedef struct rank_run {
    void *state;
    plait_status status;
    char error[256];
} rank_run;

static void *run_finish(void *arg) {
    rank_run *r = arg;
    r->status = g_ops->finish_grads(r->state);
    snprintf(r->error, sizeof r->error, "%s", plait_last_error());
    return NULL;
}

/* The local parameter set of `stage` under the plan's layer_stage. */
static void make_param_set(const int32_t *layer_stage, int stage, plait_param *locals, float *grads,
                           plait_param_set *set) {
    int n = 0;
    size_t off = 0;
    for (int i = 0; i < N_PARAMS; i++) {
        if (layer_stage[g_gpt.params[i].layer] != stage) continue;
        locals[n] = g_gpt.params[i];
        locals[n].grad = grads + off;
        for (size_t e = 0; e < locals[n].numel; e++) grads[off + e] = 0.1f * (float)(i + 1) + 0.37f * (float)e;
        off += locals[n].numel;
        n++;
    }
    *set = (plait_param_set){.struct_size = sizeof *set, .n_params = n, .params = locals,
                             .layers = g_gpt.layers, .n_layers_total = N_LAYERS};
}

static void test_finish_grads_tied_embedding(void **state) {
    (void)state;
    plait_config *cfg = make_config("[parallel]\npp = 4\n");
    fake_group group;
    pthread_barrier_init(&group.barrier, NULL, 2);
    fake_comm ends[2] = {{.group = &group, .rank = 0}, {.group = &group, .rank = 1}};
    void *st[4];
    plait_param locals[4][N_PARAMS];
    static float grads[4][1024];
    plait_param_set sets[4];
    plan_buf b;
    static plait_mesh meshes[4]; /* outlive the plugin states */
    for (int s = 0; s < 4; s++) {
        meshes[s] = make_mesh(4, s, s == 0 ? &ends[0] : s == 3 ? &ends[1] : NULL);
        assert_int_equal(create(cfg, &meshes[s], 1, &st[s]), PLAIT_OK);
        prefill(&b, 4, 1024);
        assert_int_equal(g_ops->plan(st[s], &b.plan), PLAIT_OK);
        make_param_set(b.stage, s, locals[s], grads[s], &sets[s]);
        plait_parallel_bind bind = {.struct_size = sizeof bind, .params = &sets[s], .grads_prescaled = 1};
        assert_int_equal(g_ops->bind(st[s], &bind), PLAIT_OK);
        assert_int_equal(g_ops->begin_step(st[s], 0), PLAIT_OK);
    }
    /* Expected: wte grad (stage 0, param 0) + lm_head grad (stage 3). */
    plait_param *wte = &locals[0][0], *wpe = &locals[0][1];
    plait_param *head = NULL, *ln_f = NULL;
    for (int i = 0; i < sets[3].n_params; i++) {
        if (strcmp(locals[3][i].name, "lm_head.weight") == 0) head = &locals[3][i];
        if (strcmp(locals[3][i].name, "transformer.ln_f.weight") == 0) ln_f = &locals[3][i];
    }
    assert_string_equal(wte->name, "transformer.wte.weight");
    assert_non_null(head);
    assert_non_null(ln_f);
    float want[VOCAB * EMBD], wpe_before[8 * EMBD], ln_before[EMBD];
    for (int e = 0; e < VOCAB * EMBD; e++) want[e] = wte->grad[e] + head->grad[e];
    memcpy(wpe_before, wpe->grad, sizeof wpe_before);
    memcpy(ln_before, ln_f->grad, sizeof ln_before);
    /* The middle stages hold no tied parameter: nothing to do, no group. */
    assert_int_equal(g_ops->finish_grads(st[1]), PLAIT_OK);
    assert_int_equal(g_ops->finish_grads(st[2]), PLAIT_OK);
    rank_run r0 = {.state = st[0]}, r3 = {.state = st[3]};
    pthread_t t0, t3;
    pthread_create(&t0, NULL, run_finish, &r0);
    pthread_create(&t3, NULL, run_finish, &r3);
    pthread_join(t0, NULL);
    pthread_join(t3, NULL);
    if (r0.status != PLAIT_OK) fail_msg("stage 0: %s", r0.error);
    if (r3.status != PLAIT_OK) fail_msg("stage 3: %s", r3.error);
    assert_memory_equal(wte->grad, want, sizeof want);  /* bit-identical: embedding + head */
    assert_memory_equal(head->grad, want, sizeof want);
    assert_memory_equal(wpe->grad, wpe_before, sizeof wpe_before);
    assert_memory_equal(ln_f->grad, ln_before, sizeof ln_before);
    assert_int_equal(ends[0].calls, 1);
    assert_int_equal(ends[1].calls, 1);
    assert_int_equal(ends[0].algo, PLAIT_ALGO_ORDERED); /* deterministic mode */
    assert_string_equal(ends[0].label, "pp tied embedding grad");
    plait_parallel_stats stats = {.struct_size = sizeof stats};
    g_ops->step_stats(st[0], &stats);
    assert_int_equal(stats.bytes_sent, VOCAB * EMBD * sizeof(float));
    assert_int_equal(stats.axis_bytes[2], VOCAB * EMBD * sizeof(float));
    assert_int_equal(stats.axis_bytes[0], 0);
    assert_int_equal(stats.reductions, 1);
    assert_true(stats.wait_seconds >= 0);
    memset(&stats, 0xff, sizeof stats);
    stats.struct_size = sizeof stats;
    g_ops->step_stats(st[1], &stats);
    assert_int_equal(stats.bytes_sent, 0);
    assert_int_equal(stats.reductions, 0);
    /* A released gradient is a clear error, not a crash. */
    wte->grad = NULL;
    assert_int_equal(g_ops->finish_grads(st[0]), PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), "transformer.wte.weight"));
    for (int s = 0; s < 4; s++) g_ops->destroy(st[s]);
    pthread_barrier_destroy(&group.barrier);
    plait_config_free(cfg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_descriptor),
        cmocka_unit_test(test_create_errors),
        cmocka_unit_test(test_plan_1f1b),
        cmocka_unit_test(test_plan_zb1),
        cmocka_unit_test(test_plan_interleaved_explicit),
        cmocka_unit_test(test_finish_grads_tied_embedding),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
