/* The AdamW plugin through the ABI, with a test host (the core's kernels and
 * a fake collective layer): schedule, decay masking, clipping, PyTorch
 * reference values, state export and bit-exact resume through a checkpoint,
 * and the exact, layout-independent global gradient norm. */
#include "train_io_test.h"

#include <math.h>

#include <plait/plugin.h>

#include "kernels/kernels_vector.h"
#include "optim/common/optim_common.h"
#include "plugin/loader.h"
#include "runtime/memory.h"
#include "checkpoint/checkpoint.h"
#include "train/data.h"
#include "host/host_table.h"

/* ---- test host: the core's vector kernels and a fake world ---------------- */

static const plait_kernels test_kernels = {
    .struct_size = sizeof(plait_kernels),
    .zero = plait_k_zero,
    .copy = plait_k_copy,
    .scale = plait_k_scale,
    .axpy = plait_k_axpy,
    .sumsq = plait_k_sumsq,
    .adamw = plait_k_adamw,
    .sumsq_exact = plait_k_sumsq_exact,
    .sumsq_merge = plait_k_sumsq_merge,
    .sumsq_value = plait_k_sumsq_value,
};

/* The same with the optimizer step's ABI 1.7 entries: a plugin handed a
 * place for Σg² keeps the norm on the "device" (host memory here). */
static const plait_kernels test_kernels_dev = {
    .struct_size = sizeof(plait_kernels),
    .zero = plait_k_zero,
    .copy = plait_k_copy,
    .scale = plait_k_scale,
    .axpy = plait_k_axpy,
    .sumsq = plait_k_sumsq,
    .adamw = plait_k_adamw,
    .sumsq_exact = plait_k_sumsq_exact,
    .sumsq_merge = plait_k_sumsq_merge,
    .sumsq_value = plait_k_sumsq_value,
    .sumsq_clip = plait_k_sumsq_clip,
    .adamw_multi = plait_k_adamw_multi,
};

/* Communicators are addresses of these tags. The world has `world_size`
 * ranks; every other rank's contribution to an int64 all-reduce is `peer_wire`
 * (the sum of the peers' accumulators, prepared by the test). */
static int world_tag, dp_tag;
static plait_comm *const fake_world = (plait_comm *)&world_tag;
static plait_comm *const fake_dp = (plait_comm *)&dp_tag;
static int world_size = 1, dp_rank = 0;
static int64_t peer_wire[PLAIT_OPTIM_SUMSQ_WIRE_COUNT];
static uint64_t sent_bytes;
static int allreduces;

static int fake_rank(const plait_comm *c) { return c == fake_dp ? dp_rank : 0; }
static int fake_size(const plait_comm *c) { return c == fake_dp ? 1 : world_size; }

static plait_status fake_allreduce(plait_comm *c, const void *send, void *recv, size_t count, plait_dtype dtype,
                                   plait_redop op, const plait_coll_opts *opts, plait_request **req) {
    (void)opts;
    assert_null(req);
    assert_ptr_equal(c, fake_world);
    assert_int_equal(dtype, PLAIT_I64);
    assert_int_equal(op, PLAIT_SUM);
    assert_int_equal(count, PLAIT_OPTIM_SUMSQ_WIRE_COUNT);
    const int64_t *s = send;
    int64_t *r = recv;
    for (size_t i = 0; i < count; i++) r[i] = s[i] + (world_size > 1 ? peer_wire[i] : 0);
    sent_bytes += count * 8;
    allreduces++;
    return PLAIT_OK;
}

static void fake_stats(const plait_comm *c, plait_comm_stats *out) {
    (void)c;
    out->bytes_sent = sent_bytes;
}

static const plait_coll_api fake_coll = {
    .struct_size = sizeof(plait_coll_api),
    .rank = fake_rank,
    .size = fake_size,
    .allreduce = fake_allreduce,
    .stats = fake_stats,
};

static const plait_optim_ops *ops;

/* The host handed to the plugin under test: the core's, with the kernels
 * and fake collectives above. */
static plait_host g_test_host;

static int setup(void **state) {
    (void)state;
    plait_host_install();
    g_test_host = *plait_host_table();
    g_test_host.kernels = &test_kernels;
    g_test_host.coll = &fake_coll;
    const plait_plugin_desc *d = plait_plugin_load(PLAIT_KIND_OPTIM, "adam");
    if (!d) {
        fprintf(stderr, "cannot load the adam plugin: %s\n", plait_last_error());
        return -1;
    }
    ops = d->ops;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    plait_plugins_unload_all();
    return 0;
}

static void reset_world(void) {
    world_size = 1;
    dp_rank = 0;
    sent_bytes = 0;
    allreduces = 0;
    memset(peer_wire, 0, sizeof peer_wire);
}

/* ---- a tiny parameter set ------------------------------------------------- */

typedef struct tiny {
    plait_param p[3];
    plait_param_set set;
    float w[6], b[3], gw[6], gb[3], g_copy[6];
} tiny;

/* w [2,3] (decay), b [3] (no decay), and lm_head-like tied copy of w that
 * shares its storage (skipped by the optimizer). */
static void tiny_init(tiny *t, const float *w0, const float *b0) {
    memset(t, 0, sizeof *t);
    memcpy(t->w, w0, sizeof t->w);
    memcpy(t->b, b0, sizeof t->b);
    const char *names[3] = {"w", "b", "w_copy"};
    for (int i = 0; i < 3; i++) {
        plait_param *p = &t->p[i];
        p->struct_size = sizeof *p;
        p->name = names[i];
        p->index = i;
        p->shard.dim = -1;
        p->shard.parts = 1;
        p->shard.groups = 1;
        p->tied_to = -1;
    }
    t->p[0].ndim = 2, t->p[0].shape[0] = 2, t->p[0].shape[1] = 3, t->p[0].numel = 6;
    t->p[0].data = t->w, t->p[0].grad = t->gw;
    t->p[1].flags = PLAIT_PARAM_NO_DECAY;
    t->p[1].ndim = 1, t->p[1].shape[0] = 3, t->p[1].numel = 3;
    t->p[1].data = t->b, t->p[1].grad = t->gb;
    t->p[2] = t->p[0];
    t->p[2].name = "w_copy";
    t->p[2].index = 2;
    t->p[2].flags = PLAIT_PARAM_TIED_COPY;
    t->p[2].tied_to = 0;
    t->p[2].grad = t->g_copy;
    t->set.struct_size = sizeof t->set;
    t->set.n_params = 3;
    t->set.params = t->p;
    t->set.numel = 15;
}

static const char *reference_ini = "[run]\nsteps = 100\n"
                                   "[optim]\nlr = 1e-2\nmin_lr = 1e-3\nwarmup_steps = 2\nlr_decay_steps = 6\n"
                                   "beta1 = 0.9\nbeta2 = 0.95\neps = 1e-8\nweight_decay = 0.1\ngrad_clip = 1.0\n";

static void *create(plait_config *cfg, plait_param_set *set) {
    plait_optim_init init = {.struct_size = sizeof init, .host = &g_test_host, .config = cfg,
                             .params = set, .dp_comm = fake_dp, .world = fake_world, .local_micro_batches = 1};
    void *st = NULL;
    plait_status s = ops->create(&init, &st);
    if (s != PLAIT_OK) fail_msg("create: %s", plait_last_error());
    return st;
}

static plait_status step(void *st, int64_t s, plait_optim_step_out *out) {
    plait_optim_step_in in = {.struct_size = sizeof in, .step = s};
    out->struct_size = sizeof *out;
    return ops->step(st, &in, out);
}

/* A step offered a place for Σg² (the trainer's step_in.sumsq_dev). */
static plait_status step_norm_place(void *st, int64_t s, plait_optim_step_out *out, double *sumsq) {
    plait_optim_step_in in = {.struct_size = sizeof in, .step = s, .sumsq_dev = sumsq};
    out->struct_size = sizeof *out;
    return ops->step(st, &in, out);
}

static void assert_close(float got, float want, const char *what, int i) {
    float tol = 2e-6f * fabsf(want) + 1e-8f;
    if (fabsf(got - want) > tol) fail_msg("%s[%d]: got %.9g, PyTorch %.9g", what, i, got, want);
}

/* ---- schedule and clipping ------------------------------------------------ */

static void test_lr_schedule(void **state) {
    (void)state;
    plait_optim_hparams hp = {.lr = 1e-2, .min_lr = 1e-3, .warmup_steps = 2, .decay_steps = 6};
    assert_true(fabs(plait_optim_lr_at(&hp, 0) - 1e-2 / 3) < 1e-15); /* step 0 already moves */
    assert_true(fabs(plait_optim_lr_at(&hp, 1) - 2e-2 / 3) < 1e-15);
    assert_true(fabs(plait_optim_lr_at(&hp, 2) - 1e-2) < 1e-17);      /* peak after warmup */
    assert_true(fabs(plait_optim_lr_at(&hp, 4) - (1e-3 + 0.5 * 9e-3)) < 1e-15); /* half way down */
    assert_true(plait_optim_lr_at(&hp, 6) == 1e-3);
    assert_true(plait_optim_lr_at(&hp, 1000) == 1e-3);
    for (int64_t s = 2; s < 6; s++) assert_true(plait_optim_lr_at(&hp, s + 1) < plait_optim_lr_at(&hp, s));
    hp.schedule = PLAIT_LR_CONSTANT;
    assert_true(plait_optim_lr_at(&hp, 0) == 1e-2 / 3);
    assert_true(plait_optim_lr_at(&hp, 2) == 1e-2 && plait_optim_lr_at(&hp, 500) == 1e-2);
    hp.schedule = PLAIT_LR_COSINE;
    hp.decay_steps = 1; /* decay ends before warmup does */
    assert_true(plait_optim_lr_at(&hp, 1) == 2e-2 / 3 && plait_optim_lr_at(&hp, 2) == 1e-3);
    hp.warmup_steps = 0;
    hp.decay_steps = 10;
    assert_true(fabs(plait_optim_lr_at(&hp, 0) - 1e-2) < 1e-17);

    /* lr_decay_steps = 0 means [run] steps. */
    plait_config *cfg = config_from("[run]\nsteps = 40\n[optim]\nlr_schedule = constant\n");
    assert_int_equal(plait_optim_read_hparams(&g_test_host, cfg, &hp), PLAIT_OK);
    assert_int_equal(hp.decay_steps, 40);
    assert_int_equal(hp.schedule, PLAIT_LR_CONSTANT);
    assert_true(hp.lr == 1e-3 && hp.beta2 == 0.95 && hp.grad_clip == 1.0);
    plait_config_free(cfg);

    assert_true(plait_optim_clip_scale(1.0, 2.0) == 1.0 / (2.0 + 1e-6));
    assert_true(plait_optim_clip_scale(1.0, 0.5) == 1.0);
    assert_true(plait_optim_clip_scale(0.0, 100.0) == 1.0);
}

/* The decays of ABI 1.36: linear, warmup-stable-decay in its three shapes,
 * the inverse square root; and the keys that name them. */
static void test_lr_schedule_decays(void **state) {
    (void)state;
#define NEAR(s, want) assert_true(fabs(plait_optim_lr_at(&hp, (s)) - (want)) < 1e-15)
    plait_optim_hparams hp = {
        .lr = 1e-2, .min_lr = 1e-3, .warmup_steps = 2, .decay_steps = 10, .schedule = PLAIT_LR_LINEAR};
    NEAR(1, 2e-2 / 3); /* the warmup is every schedule's */
    NEAR(2, 1e-2);
    NEAR(6, 1e-3 + 0.5 * 9e-3);
    NEAR(8, 1e-3 + 0.25 * 9e-3);
    assert_true(plait_optim_lr_at(&hp, 10) == 1e-3 && plait_optim_lr_at(&hp, 11) == 1e-3);
    for (int64_t s = 2; s < 10; s++) assert_true(plait_optim_lr_at(&hp, s + 1) < plait_optim_lr_at(&hp, s));

    hp.schedule = PLAIT_LR_WSD;
    hp.wsd_decay_steps = 4; /* stable over steps 2-6, down over 6-10 */
    for (int64_t s = 2; s < 6; s++) assert_true(plait_optim_lr_at(&hp, s) == 1e-2);
    NEAR(6, 1e-2);
    NEAR(8, 1e-3 + 0.5 * 9e-3);
    NEAR(9, 1e-3 + 0.25 * 9e-3);
    assert_true(plait_optim_lr_at(&hp, 10) == 1e-3);
    hp.wsd_shape = PLAIT_LR_DECAY_COSINE;
    NEAR(8, 1e-3 + 0.5 * 9e-3);
    NEAR(7, 1e-3 + 0.5 * (1.0 + cos(3.14159265358979323846 / 4)) * 9e-3);
    hp.wsd_shape = PLAIT_LR_DECAY_SQRT;
    NEAR(7, 1e-3 + 0.5 * 9e-3); /* 1 - sqrt(1/4) */
    NEAR(8, 1e-3 + (1.0 - sqrt(0.5)) * 9e-3);
    hp.wsd_shape = PLAIT_LR_DECAY_EXPONENTIAL;
    NEAR(8, 1e-3 + (2.0 * sqrt(0.5) - 1.0) * 9e-3);
    NEAR(6, 1e-2);
    assert_true(plait_optim_lr_at(&hp, 10) == 1e-3);
    hp.wsd_shape = PLAIT_LR_DECAY_LINEAR;
    hp.wsd_decay_steps = 50; /* longer than after warmup: the decay starts there */
    NEAR(6, 1e-3 + 0.5 * 9e-3);

    hp = (plait_optim_hparams){
        .lr = 1e-2, .min_lr = 1e-3, .warmup_steps = 4, .decay_steps = 10, .schedule = PLAIT_LR_INVERSE_SQRT};
    NEAR(3, 1e-2 * 4 / 5);
    NEAR(4, 1e-2);
    NEAR(16, 5e-3); /* sqrt(4 / 16); the decay's end plays no part */
    NEAR(400, 1e-3);
    assert_true(plait_optim_lr_at(&hp, 1600) == 1e-3); /* the floor */
    hp.warmup_steps = 0;
    hp.min_lr = 0;
    NEAR(0, 1e-2);
    NEAR(1, 1e-2);
    NEAR(4, 5e-3);
#undef NEAR

    plait_config *cfg = config_from("[optim]\nlr_schedule = wsd\nlr_wsd_decay_steps = 5\nlr_wsd_decay_style = sqrt\n");
    assert_int_equal(plait_optim_read_hparams(&g_test_host, cfg, &hp), PLAIT_OK);
    assert_int_equal(hp.schedule, PLAIT_LR_WSD);
    assert_int_equal(hp.wsd_decay_steps, 5);
    assert_int_equal(hp.wsd_shape, PLAIT_LR_DECAY_SQRT);
    plait_config_free(cfg);
    cfg = config_from("[optim]\nlr_schedule = linear\nlr_wsd_decay_steps = 5\n");
    assert_int_equal(plait_optim_read_hparams(&g_test_host, cfg, &hp), PLAIT_OK);
    assert_int_equal(hp.schedule, PLAIT_LR_LINEAR);
    assert_int_equal(hp.wsd_decay_steps, 0); /* read only for wsd */
    plait_config_free(cfg);
    cfg = config_from("[optim]\nlr_schedule = inverse_sqrt\n");
    assert_int_equal(plait_optim_read_hparams(&g_test_host, cfg, &hp), PLAIT_OK);
    assert_int_equal(hp.schedule, PLAIT_LR_INVERSE_SQRT);
    plait_config_free(cfg);
}

/* ---- against PyTorch ------------------------------------------------------ */

/* generated by tests/train_io/adam_reference.py with torch 1.13.0a0 */
static const float w0[] = {0.5f, -0.25f, 0.125f, 1.0f, -1.5f, 0.75f};
static const float b0[] = {0.1f, -0.2f, 0.3f};
static const float grads_w[4][6] = {{0.9f, -0.4f, 0.3f, 1.2f, -0.7f, 0.2f},
                                    {0.05f, 0.02f, -0.03f, 0.04f, -0.01f, 0.06f},
                                    {-1.5f, 2.0f, 0.5f, -0.25f, 1.0f, -0.75f},
                                    {0.1f, -0.2f, 0.05f, 0.0f, 0.15f, -0.1f}};
static const float grads_b[4][3] = {{0.5f, -0.6f, 0.4f}, {0.02f, -0.05f, 0.03f}, {0.3f, 0.2f, -0.1f}, {-0.05f, 0.1f, 0.0f}};
static const float ref_w[4][6] = {
    {0.496500015f, -0.246583343f, 0.121625006f, 0.996333361f, -1.49616671f, 0.746416688f},
    {0.491131276f, -0.242404625f, 0.118068382f, 0.990828931f, -1.49050689f, 0.739518583f},
    {0.491577595f, -0.246883109f, 0.110561989f, 0.985129535f, -1.48962998f, 0.741489828f},
    {0.491096735f, -0.248612553f, 0.104209147f, 0.980881929f, -1.49022257f, 0.744332492f}};
static const float ref_b[4][3] = {{0.0966666713f, -0.196666673f, 0.296666682f},
                                  {0.0917660296f, -0.191398397f, 0.29146558f},
                                  {0.0840255693f, -0.186798379f, 0.286532879f},
                                  {0.0794715136f, -0.185210466f, 0.282979131f}};
static const double ref_norm[4] = {1.94935882, 0.113578163, 2.87489128, 0.312249899};
static const double ref_lr[4] = {0.00333333333, 0.00666666667, 0.01, 0.00868198052};
static const float ref_w_exp_avg[] = {0.000748917053f, 0.0292722825f, 0.0294418298f, 0.0402898937f, 0.0193176996f, -0.0211397614f};
static const float ref_w_exp_avg_sq[] = {0.0226816386f, 0.0268115364f, 0.00261770468f, 0.0166763812f, 0.0124044418f, 0.00434645591f};
static const float ref_b_exp_avg[] = {0.0247101001f, -0.0102270292f, 0.014258205f};
static const float ref_b_exp_avg_sq[] = {0.00348060043f, 0.00490394374f, 0.00190308189f};

static void test_matches_pytorch(void **state) {
    (void)state;
    reset_world();
    plait_config *cfg = config_from(reference_ini);
    tiny t;
    tiny_init(&t, w0, b0);
    void *st = create(cfg, &t.set);
    assert_int_equal(ops->materialize(st, NULL), PLAIT_OK);
    for (int s = 0; s < 4; s++) {
        memcpy(t.gw, grads_w[s], sizeof t.gw);
        memcpy(t.gb, grads_b[s], sizeof t.gb);
        for (int i = 0; i < 6; i++) t.g_copy[i] = 100.0f; /* a tied copy's gradient never counts */
        plait_optim_step_out out;
        if (step(st, s, &out) != PLAIT_OK) fail_msg("step %d: %s", s, plait_last_error());
        for (int i = 0; i < 6; i++) assert_close(t.w[i], ref_w[s][i], "w", i);
        for (int i = 0; i < 3; i++) assert_close(t.b[i], ref_b[s][i], "b", i);
        assert_true(fabs(out.grad_norm - ref_norm[s]) < 1e-6 * ref_norm[s]);
        assert_true(fabs(out.lr - ref_lr[s]) < 1e-11);
        assert_int_equal(out.bytes_sent, 0); /* one rank: nothing sent */
    }
    assert_int_equal(ops->get_step(st), 4);
    float buf[6];
    struct {
        int32_t index;
        const char *which;
        const float *want;
        int n;
    } ex[] = {{0, "exp_avg", ref_w_exp_avg, 6}, {0, "exp_avg_sq", ref_w_exp_avg_sq, 6},
              {1, "exp_avg", ref_b_exp_avg, 3}, {1, "exp_avg_sq", ref_b_exp_avg_sq, 3},
              {2, "exp_avg", ref_w_exp_avg, 6}, /* the tied copy shares the original's state */
              {1, "param", ref_b[3], 3}};
    for (size_t k = 0; k < sizeof ex / sizeof ex[0]; k++) {
        assert_int_equal(ops->export_tensor(st, ex[k].index, ex[k].which, buf), PLAIT_OK);
        for (int i = 0; i < ex[k].n; i++) assert_close(buf[i], ex[k].want[i], ex[k].which, i);
    }
    assert_int_equal(ops->export_tensor(st, 1, "exp_avg", NULL), PLAIT_OK); /* non-zero DP ranks */
    assert_int_equal(ops->export_tensor(st, 1, "momentum", buf), PLAIT_ERR_INVALID_ARG);
    assert_int_equal(ops->export_tensor(st, 7, "param", buf), PLAIT_ERR_INVALID_ARG);
    /* Memory: w and b own parameters, gradients and state (the ZeRO paper's
     * 4+4+8 bytes per parameter); the tied copy's own gradient is a buffer. */
    plait_optim_memory m = {.struct_size = sizeof m};
    ops->memory(st, &m);
    assert_int_equal(m.param_bytes, 9 * 4);
    assert_int_equal(m.grad_bytes, 9 * 4);
    assert_int_equal(m.buffer_bytes, 6 * 4);
    assert_int_equal(m.state_bytes, 2 * 9 * 4);
    assert_int_equal(plait_mem_usage_of("optimizer state"), 2 * 9 * 4);
    ops->destroy(st);
    assert_int_equal(plait_mem_usage_of("optimizer state"), 0);
    plait_config_free(cfg);
}

/* Weight decay only where allowed: with zero gradients Adam's step is 0 and
 * only decay moves parameters. */
static void test_decay_mask(void **state) {
    (void)state;
    reset_world();
    plait_config *cfg = config_from("[optim]\nlr = 0.5\nlr_schedule = constant\nweight_decay = 0.1\n");
    tiny t;
    tiny_init(&t, w0, b0);
    void *st = create(cfg, &t.set);
    assert_int_equal(ops->materialize(st, NULL), PLAIT_OK);
    plait_optim_step_out out;
    assert_int_equal(step(st, 0, &out), PLAIT_OK);
    assert_true(out.lr == 0.5 && out.grad_norm == 0.0);
    for (int i = 0; i < 6; i++) assert_true(t.w[i] == w0[i] * (1.0f - 0.5f * 0.1f));
    assert_memory_equal(t.b, b0, sizeof t.b);
    ops->destroy(st);
    plait_config_free(cfg);
}

static void test_nonfinite_gradient(void **state) {
    (void)state;
    reset_world();
    plait_config *cfg = config_from(reference_ini);
    tiny t;
    tiny_init(&t, w0, b0);
    void *st = create(cfg, &t.set);
    assert_int_equal(ops->materialize(st, NULL), PLAIT_OK);
    memcpy(t.gw, grads_w[0], sizeof t.gw);
    t.gb[1] = NAN;
    plait_optim_step_out out;
    assert_int_equal(step(st, 3, &out), PLAIT_ERR_INVALID_ARG);
    assert_error_contains("not finite");
    assert_error_contains("step 4"); /* the 0-based step 3 is metrics.csv's step 4 */
    assert_memory_equal(t.w, w0, sizeof t.w); /* nothing changed */
    assert_int_equal(ops->get_step(st), 0);
    ops->destroy(st);
    plait_config_free(cfg);
}

/* With the ABI 1.7 kernels and a place for Σg², one rank's step keeps the
 * norm there (norm_on_device) and gives the host path's parameters and
 * moments bit for bit, clipping included; the place holds Σg². A step
 * offered no place reads the norm as before. */
static void test_norm_on_device(void **state) {
    (void)state;
    reset_world();
    plait_config *cfg = config_from(reference_ini);
    tiny host, dev;
    tiny_init(&host, w0, b0);
    tiny_init(&dev, w0, b0);
    void *sh = create(cfg, &host.set);
    g_test_host.kernels = &test_kernels_dev;
    void *sd = create(cfg, &dev.set);
    assert_int_equal(ops->materialize(sh, NULL), PLAIT_OK);
    assert_int_equal(ops->materialize(sd, NULL), PLAIT_OK);
    for (int s = 0; s < 4; s++) {
        for (int k = 0; k < 2; k++) {
            tiny *t = k ? &dev : &host;
            memcpy(t->gw, grads_w[s], sizeof t->gw);
            memcpy(t->gb, grads_b[s], sizeof t->gb);
            for (int i = 0; i < 6; i++) t->g_copy[i] = 100.0f;
        }
        plait_optim_step_out oh, od;
        double sumsq = -1;
        g_test_host.kernels = &test_kernels;
        assert_int_equal(step(sh, s, &oh), PLAIT_OK);
        g_test_host.kernels = &test_kernels_dev;
        assert_int_equal(step_norm_place(sd, s, &od, &sumsq), PLAIT_OK);
        assert_int_equal(od.norm_on_device, 1);
        assert_int_equal(oh.norm_on_device, 0);
        assert_true(sqrt(sumsq) == oh.grad_norm);
        assert_true(fabs(sqrt(sumsq) - ref_norm[s]) < 1e-6 * ref_norm[s]);
        assert_memory_equal(dev.w, host.w, sizeof dev.w);
        assert_memory_equal(dev.b, host.b, sizeof dev.b);
    }
    float eh[6], ed[6];
    assert_int_equal(ops->export_tensor(sh, 0, "exp_avg_sq", eh), PLAIT_OK);
    assert_int_equal(ops->export_tensor(sd, 0, "exp_avg_sq", ed), PLAIT_OK);
    assert_memory_equal(eh, ed, sizeof eh);
    /* no place offered: the host path, even with the kernels */
    plait_optim_step_out o;
    assert_int_equal(step(sd, 4, &o), PLAIT_OK);
    assert_int_equal(o.norm_on_device, 0);
    assert_true(isfinite(o.grad_norm));
    g_test_host.kernels = &test_kernels;
    ops->destroy(sh);
    ops->destroy(sd);
    plait_config_free(cfg);
}

/* A gradient that is not finite, the norm on the device: Σg² is +Inf where
 * the trainer reads it (which stops the run) and no parameter changed. */
static void test_nonfinite_gradient_on_device(void **state) {
    (void)state;
    reset_world();
    plait_config *cfg = config_from(reference_ini);
    tiny t;
    tiny_init(&t, w0, b0);
    g_test_host.kernels = &test_kernels_dev;
    void *st = create(cfg, &t.set);
    assert_int_equal(ops->materialize(st, NULL), PLAIT_OK);
    memcpy(t.gw, grads_w[0], sizeof t.gw);
    t.gb[1] = NAN;
    plait_optim_step_out out;
    double sumsq = 0;
    assert_int_equal(step_norm_place(st, 3, &out, &sumsq), PLAIT_OK);
    assert_int_equal(out.norm_on_device, 1);
    assert_true(isinf(sumsq));
    assert_memory_equal(t.w, w0, sizeof t.w);
    assert_memory_equal(t.b, b0, sizeof t.b);
    g_test_host.kernels = &test_kernels;
    ops->destroy(st);
    plait_config_free(cfg);
}

/* ---- state from a value source ------------------------------------------- */

typedef struct partial_src {
    int has_sq; /* provide exp_avg_sq too */
    int reads;
} partial_src;

static plait_status partial_read(void *ctx, int32_t index, const char *which, size_t off, size_t n, float *dst) {
    partial_src *p = ctx;
    p->reads++;
    if (strcmp(which, "exp_avg_sq") == 0 && !p->has_sq) return plait_set_error(PLAIT_ERR_UNSUPPORTED, "none");
    for (size_t i = 0; i < n; i++) dst[i] = (float)(index * 10 + (int)(off + i)) * 0.01f;
    return PLAIT_OK;
}

static void test_materialize_from_source(void **state) {
    (void)state;
    reset_world();
    plait_config *cfg = config_from(reference_ini);
    tiny t;
    tiny_init(&t, w0, b0);
    void *st = create(cfg, &t.set);
    partial_src ctx = {.has_sq = 1};
    plait_value_source src = {.struct_size = sizeof src, .ctx = &ctx, .read = partial_read};
    assert_int_equal(ops->materialize(st, &src), PLAIT_OK);
    assert_int_equal(ctx.reads, 4); /* w and b, two states each; the tied copy shares w's */
    float buf[6];
    assert_int_equal(ops->export_tensor(st, 1, "exp_avg_sq", buf), PLAIT_OK);
    assert_true(buf[2] == 0.12f);
    ops->destroy(st);

    /* Half a state is a damaged checkpoint, refused. */
    st = create(cfg, &t.set);
    ctx.has_sq = 0;
    assert_int_equal(ops->materialize(st, &src), PLAIT_ERR_PROTOCOL);
    assert_error_contains("incomplete");
    ops->destroy(st);
    plait_config_free(cfg);
}

/* ---- resume through a checkpoint is bit-exact ----------------------------- */

/* A toy objective whose gradient depends on the parameters and on the
 * corpus batch of the step: g = p - token/255 (elementwise, cycled). */
static void toy_grads(tiny *t, const plait_data *d, int64_t s) {
    int32_t tok[2 * 8];
    assert_int_equal(plait_data_batch(d, PLAIT_DATA_TRAIN, s, 0, 2, 8, tok, NULL), PLAIT_OK);
    for (int i = 0; i < 6; i++) t->gw[i] = t->w[i] - (float)tok[i] / 255.0f;
    for (int i = 0; i < 3; i++) t->gb[i] = 3.0f * (t->b[i] - (float)tok[8 + i] / 255.0f);
}

static void save_checkpoint(const char *out, int64_t s, void *st, tiny *t) {
    plait_ckpt_writer *w;
    assert_int_equal(plait_ckpt_writer_begin(out, s, &w), PLAIT_OK);
    plait_model_spec spec = {.struct_size = sizeof spec, .n_params = 3, .params = t->p};
    assert_int_equal(plait_ckpt_declare_model(w, &spec, ops->state_names), PLAIT_OK);
    float buf[6];
    for (int32_t i = 0; i < 3; i++) {
        if (!plait_ckpt_param_stored(&spec, i)) continue;
        const char *which[3] = {"param", "exp_avg", "exp_avg_sq"};
        for (int k = 0; k < 3; k++) {
            assert_int_equal(ops->export_tensor(st, i, which[k], buf), PLAIT_OK);
            char name[128];
            if (k) plait_ckpt_optim_name(name, sizeof name, which[k], t->p[i].name);
            else snprintf(name, sizeof name, "%s", t->p[i].name);
            assert_int_equal(plait_ckpt_write(w, name, buf, t->p[i].numel), PLAIT_OK);
        }
    }
    plait_ckpt_state cs = {.step = s, .seed = 1337, .data_step = s, .optim_step = ops->get_step(st)};
    assert_int_equal(plait_ckpt_commit(w, &cs, 2, 0), PLAIT_OK);
}

static void test_resume_is_bit_exact(void **state) {
    (void)state;
    reset_world();
    plait_config *cfg = config_from(reference_ini);
    plait_data *d;
    if (plait_data_open_config(cfg, 8, &d) != PLAIT_OK) fail_msg("%s", plait_last_error());
    plait_optim_step_out out;

    /* Straight through: 8 steps. */
    tiny a;
    tiny_init(&a, w0, b0);
    void *sa = create(cfg, &a.set);
    assert_int_equal(ops->materialize(sa, NULL), PLAIT_OK);
    double norms[8];
    for (int64_t s = 0; s < 8; s++) {
        toy_grads(&a, d, s);
        assert_int_equal(step(sa, s, &out), PLAIT_OK);
        norms[s] = out.grad_norm;
    }

    /* Interrupted: 5 steps, checkpoint, a new optimizer restored from it. */
    char out_dir[PATH_MAX];
    make_scratch(out_dir, sizeof out_dir, "resume");
    tiny b;
    tiny_init(&b, w0, b0);
    void *sb = create(cfg, &b.set);
    assert_int_equal(ops->materialize(sb, NULL), PLAIT_OK);
    for (int64_t s = 0; s < 5; s++) {
        toy_grads(&b, d, s);
        assert_int_equal(step(sb, s, &out), PLAIT_OK);
        if (s == 2) save_checkpoint(out_dir, 3, sb, &b);
    }
    save_checkpoint(out_dir, 5, sb, &b);
    ops->destroy(sb);

    plait_ckpt *ck;
    assert_int_equal(plait_ckpt_open_latest(out_dir, &ck), PLAIT_OK);
    assert_non_null(ck);
    const plait_ckpt_state *cs = plait_ckpt_state_of(ck);
    assert_int_equal(cs->step, 5);
    tiny c;
    tiny_init(&c, w0, b0); /* fresh values, overwritten from the checkpoint */
    plait_model_spec spec = {.struct_size = sizeof spec, .n_params = 3, .params = c.p};
    plait_ckpt_source src;
    plait_ckpt_source_init(&src, ck, &spec, &c.set);
    assert_int_equal(src.src.read(src.src.ctx, 0, "param", 0, 6, c.w), PLAIT_OK); /* the core's part */
    assert_int_equal(src.src.read(src.src.ctx, 1, "param", 0, 3, c.b), PLAIT_OK);
    void *sc = create(cfg, &c.set);
    assert_int_equal(ops->materialize(sc, &src.src), PLAIT_OK);
    ops->set_step(sc, cs->optim_step);
    for (int64_t s = cs->data_step; s < 8; s++) {
        toy_grads(&c, d, s);
        assert_int_equal(step(sc, s, &out), PLAIT_OK);
        assert_true(out.grad_norm == norms[s]);
    }
    assert_memory_equal(c.w, a.w, sizeof a.w);
    assert_memory_equal(c.b, a.b, sizeof a.b);
    for (int32_t i = 0; i < 2; i++) {
        float x[6], y[6];
        assert_int_equal(ops->export_tensor(sa, i, "exp_avg_sq", x), PLAIT_OK);
        assert_int_equal(ops->export_tensor(sc, i, "exp_avg_sq", y), PLAIT_OK);
        assert_memory_equal(x, y, c.p[i].numel * sizeof(float));
    }
    /* keep_checkpoints = 2 kept both saves. */
    plait_ckpt_entry e[4];
    assert_int_equal(plait_ckpt_list(out_dir, e, 4), 2);
    plait_ckpt_close(ck);
    ops->destroy(sa);
    ops->destroy(sc);
    plait_data_close(d);
    rm_tree(out_dir);
    plait_config_free(cfg);
}

/* ---- the global norm: who counts, and exactness across ranks --------------- */

static void test_norm_rule(void **state) {
    (void)state;
    plait_param p = {.struct_size = sizeof p, .shard = {.dim = -1, .parts = 1}};
    plait_param split = p;
    split.shard.dim = 0;
    split.shard.parts = 2;
    split.shard.index = 1;
    plait_param copy = p;
    copy.flags = PLAIT_PARAM_TIED_COPY;
    plait_optim_topology one = {.dp_rank = 0, .tp = 1, .tp_rank = 0};
    assert_true(plait_optim_counts_in_norm(&one, &p));
    assert_false(plait_optim_counts_in_norm(&one, &copy));
    plait_optim_topology dp1 = {.dp_rank = 1, .tp = 1};
    assert_false(plait_optim_counts_in_norm(&dp1, &p));
    plait_optim_topology tp0 = {.dp_rank = 0, .tp = 2, .tp_rank = 0}, tp1 = {.dp_rank = 0, .tp = 2, .tp_rank = 1};
    assert_true(plait_optim_counts_in_norm(&tp0, &p));
    assert_false(plait_optim_counts_in_norm(&tp1, &p)); /* replicated over TP: rank 0 only */
    assert_true(plait_optim_counts_in_norm(&tp0, &split));
    assert_true(plait_optim_counts_in_norm(&tp1, &split)); /* disjoint slices: every TP rank */

    /* The TP rank is read from the split parameters. */
    plait_config *cfg = config_from("[parallel]\ntp = 2\n");
    plait_param ps[2] = {p, split};
    plait_param_set set = {.struct_size = sizeof set, .n_params = 2, .params = ps};
    plait_optim_init init = {.struct_size = sizeof init, .host = &g_test_host, .config = cfg, .params = &set};
    plait_optim_topology topo;
    assert_int_equal(plait_optim_topology_from_init(&init, &topo), PLAIT_OK);
    assert_true(topo.tp == 2 && topo.tp_rank == 1 && topo.dp_rank == 0);
    set.n_params = 1; /* nothing split although tp = 2 */
    assert_int_equal(plait_optim_topology_from_init(&init, &topo), PLAIT_ERR_INTERNAL);
    plait_config_free(cfg);
}

/* However the gradient elements are spread over ranks, the merged norm has
 * the same bits. */
static void test_norm_is_layout_independent(void **state) {
    (void)state;
    enum { N = 5000 };
    float *g = malloc(N * sizeof *g);
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < N; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        double u = (double)(x >> 11) / 9007199254740992.0;
        g[i] = (float)((u - 0.5) * pow(10.0, (double)(i % 13) - 6)); /* wide dynamic range */
    }
    plait_sumsq_acc whole;
    memset(&whole, 0, sizeof whole);
    plait_k_sumsq_exact(&whole, g, N);
    double want = plait_k_sumsq_value(&whole);
    const int cuts[][4] = {{1, 2, 3, 4}, {N / 3, N / 2, N - 1, N}, {7, 11, 4000, 4999}};
    for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
        /* Five "ranks": [0,c0) [c0,c1) [c1,c2) [c2,c3) [c3,N); wires summed as int64. */
        int64_t sum[PLAIT_OPTIM_SUMSQ_WIRE_COUNT] = {0};
        int lo = 0;
        for (int r = 0; r <= 4; r++) {
            int hi = r < 4 ? cuts[c][r] : N;
            plait_sumsq_acc acc;
            memset(&acc, 0, sizeof acc);
            plait_k_sumsq_exact(&acc, g + lo, (size_t)(hi - lo));
            int64_t wire[PLAIT_OPTIM_SUMSQ_WIRE_COUNT];
            plait_optim_sumsq_to_wire(&acc, wire);
            for (int k = 0; k < PLAIT_OPTIM_SUMSQ_WIRE_COUNT; k++) sum[k] += wire[k];
            lo = hi;
        }
        plait_sumsq_acc merged;
        plait_optim_sumsq_from_wire(sum, &merged);
        double got = plait_k_sumsq_value(&merged);
        assert_memory_equal(&got, &want, sizeof got);
    }

    /* Through the plugin on a 2-rank world: this rank holds the first 1000
     * elements, the peer the rest; the reported norm is the whole one. */
    reset_world();
    world_size = 2;
    plait_sumsq_acc peer;
    memset(&peer, 0, sizeof peer);
    plait_k_sumsq_exact(&peer, g + 1000, N - 1000);
    plait_optim_sumsq_to_wire(&peer, peer_wire);
    plait_config *cfg = config_from("[optim]\ngrad_clip = 0\nlr = 0\nmin_lr = 0\n");
    plait_param p = {.struct_size = sizeof p, .name = "g", .ndim = 1, .shape = {1000}, .numel = 1000,
                     .shard = {.dim = -1, .parts = 1}, .tied_to = -1};
    float *data = calloc(1000, sizeof *data);
    p.data = data;
    p.grad = g;
    plait_param_set set = {.struct_size = sizeof set, .n_params = 1, .params = &p, .numel = 1000};
    void *st = create(cfg, &set);
    assert_int_equal(ops->materialize(st, NULL), PLAIT_OK);
    plait_optim_step_out out;
    assert_int_equal(step(st, 0, &out), PLAIT_OK);
    double want_norm = sqrt(want);
    assert_memory_equal(&out.grad_norm, &want_norm, sizeof want_norm);
    assert_int_equal(allreduces, 1);
    assert_int_equal(out.bytes_sent, PLAIT_OPTIM_SUMSQ_WIRE_COUNT * 8);
    ops->destroy(st);
    /* DP rank 1 contributes nothing of its own: the norm is the peers' part. */
    dp_rank = 1;
    st = create(cfg, &set);
    assert_int_equal(ops->materialize(st, NULL), PLAIT_OK);
    assert_int_equal(step(st, 1, &out), PLAIT_OK);
    double peer_norm = sqrt(plait_k_sumsq_value(&peer));
    assert_memory_equal(&out.grad_norm, &peer_norm, sizeof peer_norm);
    ops->destroy(st);
    free(data);
    free(g);
    plait_config_free(cfg);
    reset_world();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lr_schedule),
        cmocka_unit_test(test_lr_schedule_decays),
        cmocka_unit_test(test_matches_pytorch),
        cmocka_unit_test(test_decay_mask),
        cmocka_unit_test(test_nonfinite_gradient),
        cmocka_unit_test(test_norm_on_device),
        cmocka_unit_test(test_nonfinite_gradient_on_device),
        cmocka_unit_test(test_materialize_from_source),
        cmocka_unit_test(test_resume_is_bit_exact),
        cmocka_unit_test(test_norm_rule),
        cmocka_unit_test(test_norm_is_layout_independent),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
