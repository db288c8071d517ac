/*
 * When the dp plugin communicates, driven as the trainer drives it (per
 * step: begin_step, grads_ready for every layer from the last to the first
 * for each local micro-batch with last = 1 on the last one, finish_grads)
 * over a communicator that only records the all-reduces started:
 * - under gradient accumulation nothing starts before the last micro-batch
 *   (the earlier ones only accumulate), and on the last one each bucket
 *   starts as soon as its layers are done, overlapping the rest of the
 *   backward;
 * - a bucket counts as early (overlapped) only if it started before the
 *   step's final grads_ready: one bucket holding the whole model, or the
 *   bucket of layer 0, overlaps nothing;
 * - overlap = false starts everything in finish_grads;
 * - a tied copy on the same rank (the head's copy of wte) is folded into
 *   its original before the original's bucket starts and never reduced on
 *   its own, except in deterministic mode (the canonical order).
 * Every test runs twice: on the plain test host, and on the offset host
 * (tests/support/offset_host.h) with parameters and gradients in its device
 * memory, which faults on any host access: the plugin must reach them only
 * through kernels, the device's copy and collectives that name the kind.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include <plait/parallel.h>
#include <plait/plugin.h>

#include "config/config.h"
#include "plugin/loader.h"
#include "runtime/error.h"
#include "runtime/memory.h"
#include "host/host_table.h"
#include "support/offset_host.h"

/* ---- a recording DP group: this rank is DP rank 0 of 2 -------------------- */

typedef struct recorder {
    int started;             /* all-reduces started */
    int waited;              /* ... and completed by wait() */
    int synchronous;         /* started without a request (blocking) */
    char label[64];
    plait_coll_algo algo;
    float layer0_sent;       /* layer 0's first gradient element as its all-reduce started */
    int layer0_reduced;
} recorder;

static recorder g_rec;
static float *g_grad_flat; /* the model's gradients as the collectives see them (host addresses) */
static int g_comm_token, g_req_token;
#define DP_COMM ((plait_comm *)(void *)&g_comm_token)
#define REQUEST ((plait_request *)(void *)&g_req_token)

static int fake_rank(const plait_comm *c) { (void)c; return 0; }
static int fake_size(const plait_comm *c) { (void)c; return 2; }
static int fake_world_rank(const plait_comm *c, int r) { (void)c; return r; }
static const char *fake_name(const plait_comm *c) { (void)c; return "dp"; }

static plait_status fake_allreduce(plait_comm *comm, const void *send, void *recv, size_t count, plait_dtype dtype,
                                   plait_redop op, const plait_coll_opts *opts, plait_request **req) {
    (void)send;
    (void)count;
    if (comm != DP_COMM || dtype != PLAIT_F32 || op != PLAIT_SUM) return PLAIT_ERR_INVALID_ARG;
    g_rec.started++;
    if (recv == g_grad_flat) { /* the bucket that starts at layer 0's gradient */
        g_rec.layer0_sent = g_grad_flat[0];
        g_rec.layer0_reduced++;
    }
    snprintf(g_rec.label, sizeof g_rec.label, "%s", opts && opts->label ? opts->label : "");
    g_rec.algo = opts ? opts->algo : PLAIT_ALGO_AUTO;
    if (req) *req = REQUEST;
    else g_rec.synchronous++;
    return PLAIT_OK;
}

static plait_status fake_wait(plait_request *req) {
    if (req != REQUEST) return PLAIT_ERR_INVALID_ARG;
    g_rec.waited++;
    return PLAIT_OK;
}

/* Bind's broadcast from DP rank 0 (us) and checksum exchange: the peer
 * agrees with whatever we hold. */
static plait_status fake_broadcast(plait_comm *comm, void *buf, size_t count, plait_dtype dtype, int root,
                                   const plait_coll_opts *opts, plait_request **req) {
    (void)buf;
    (void)count;
    (void)dtype;
    (void)opts;
    return comm == DP_COMM && root == 0 && !req ? PLAIT_OK : PLAIT_ERR_INVALID_ARG;
}

static plait_status fake_allgather(plait_comm *comm, const void *send, void *recv, size_t count, plait_dtype dtype,
                                   const plait_coll_opts *opts, plait_request **req) {
    (void)opts;
    if (comm != DP_COMM || dtype != PLAIT_I64 || req) return PLAIT_ERR_INVALID_ARG;
    memcpy(recv, send, count * 8);
    memcpy((char *)recv + count * 8, send, count * 8);
    return PLAIT_OK;
}

static void fake_stats(const plait_comm *comm, plait_comm_stats *out) {
    (void)comm;
    out->bytes_sent = 0;
}

static const plait_coll_api fake_coll = {
    .struct_size = sizeof(plait_coll_api),
    .rank = fake_rank,
    .size = fake_size,
    .world_rank = fake_world_rank,
    .name = fake_name,
    .allreduce = fake_allreduce,
    .allgather = fake_allgather,
    .broadcast = fake_broadcast,
    .wait = fake_wait,
    .stats = fake_stats,
};

/* ---- a model of N_LAYERS layers, one parameter each ----------------------- */

enum { N_LAYERS = 4, NUMEL = 16 };

static plait_param g_params[N_LAYERS];
static plait_layer g_layers[N_LAYERS];
static float g_host_data[N_LAYERS * NUMEL], g_host_grad[N_LAYERS * NUMEL];
/* Host views of the parameters and gradients the plugin gets (the arrays
 * above, or the offset device's memory behind its pointers). */
static float *g_data, *g_grad;
static plait_param_set g_set;
static const plait_plugin_desc *g_desc;
static const plait_parallel_ops *g_ops;

/* The host handed to the plugin under test: the core's, with fake
 * collectives; g_device_host: the offset host over it. */
static plait_host g_test_host, g_device_host;
static const plait_host *g_host;

static int setup_on(int device) {
    plait_host_install();
    g_test_host = *plait_host_table();
    g_test_host.coll = &fake_coll; /* handed to the plugin through its init argument */
    g_device_host = g_test_host;
    oh_install(&g_device_host);
    g_host = device ? &g_device_host : &g_test_host;
    float *data = g_host_data, *grad = g_host_grad; /* what the plugin sees */
    if (device) {
        data = g_host->alloc(sizeof g_host_data, g_host->device_info->mem_kind, 64, "test parameters");
        grad = g_host->alloc(sizeof g_host_grad, g_host->device_info->mem_kind, 64, "test gradients");
        if (!data || !grad) return -1;
    }
    g_data = oh_real(data);
    g_grad = oh_real(grad);
    g_desc = plait_plugin_load(PLAIT_KIND_PARALLEL, "dp");
    if (!g_desc) {
        fprintf(stderr, "cannot load the dp plugin: %s\n", plait_last_error());
        return -1;
    }
    g_ops = g_desc->ops;
    static char names[N_LAYERS][16];
    for (int l = 0; l < N_LAYERS; l++) {
        snprintf(names[l], sizeof names[l], "layer%d.weight", l);
        g_layers[l] = (plait_layer){.struct_size = sizeof(plait_layer), .name = names[l], .index = l,
                                    .first_param = l, .n_params = 1};
        /* gradients contiguous in model order, as in the core's flat buffer */
        g_params[l] = (plait_param){.struct_size = sizeof(plait_param), .name = names[l], .index = l, .layer = l,
                                    .ndim = 1, .shape = {NUMEL}, .shard = {.dim = -1, .parts = 1},
                                    .local_shape = {NUMEL}, .numel = NUMEL, .tied_to = -1,
                                    .data = data + l * NUMEL, .grad = grad + l * NUMEL,
                                    .flat_offset = (size_t)l * NUMEL};
    }
    g_grad_flat = g_grad;
    g_set = (plait_param_set){.struct_size = sizeof g_set, .n_params = N_LAYERS, .params = g_params,
                              .n_layers = N_LAYERS, .layers = g_layers, .n_layers_total = N_LAYERS,
                              .numel = N_LAYERS * NUMEL, .data_flat = data, .grad_flat = grad};
    return 0;
}

static int setup(void **state) {
    (void)state;
    return setup_on(0);
}

static int setup_device(void **state) {
    (void)state;
    return setup_on(1);
}

static int teardown(void **state) {
    (void)state;
    if (g_host == &g_device_host) {
        g_host->free(g_set.data_flat);
        g_host->free(g_set.grad_flat);
    }
    return 0;
}

static plait_config *g_cfg;
static plait_mesh g_mesh;

/* A bound dp plugin (dp = 2, DP rank 0) configured by `ini`. */
static void *make_dp(const char *ini, int deterministic) {
    g_cfg = plait_config_new();
    assert_non_null(g_cfg);
    assert_int_equal(plait_config_declare_core(g_cfg), PLAIT_OK);
    assert_int_equal(plait_config_declare(g_cfg, "parallel.dp", g_desc->keys, g_desc->n_keys,
                                          g_desc->key_size, "plugin parallel/dp"),
                     PLAIT_OK);
    assert_int_equal(plait_config_load_string(g_cfg, "test.ini", ini), PLAIT_OK);
    char *envp[] = {NULL};
    if (plait_config_finalize(g_cfg, envp) != PLAIT_OK) fail_msg("config: %s", plait_last_error());
    g_mesh = (plait_mesh){.struct_size = sizeof g_mesh, .dp = 2, .tp = 1, .pp = 1, .world_size = 2,
                          .dp_comm = DP_COMM, .order = "tp,dp,pp"};
    plait_parallel_init init = {.struct_size = sizeof init, .host = g_host, .config = g_cfg,
                                .mesh = &g_mesh, .deterministic = deterministic};
    void *st = NULL;
    assert_int_equal(g_ops->create(&init, &st), PLAIT_OK);
    plait_parallel_bind bind = {.struct_size = sizeof bind, .params = &g_set, .grads_prescaled = 1};
    if (g_ops->bind(st, &bind) != PLAIT_OK) fail_msg("bind: %s", plait_last_error());
    return st;
}

static void free_dp(void *st) {
    g_ops->destroy(st);
    plait_config_free(g_cfg);
}

/* One step of `micro_batches` local micro-batches, as the trainer runs it.
 * started[mb][k]: all-reduces started after the k-th grads_ready of
 * micro-batch mb (layers N_LAYERS-1 .. 0); *at_finish after finish_grads. */
static void run_step(void *st, int micro_batches, int started[][N_LAYERS], int *at_finish,
                     plait_parallel_stats *stats) {
    memset(&g_rec, 0, sizeof g_rec);
    assert_int_equal(g_ops->begin_step(st, 0), PLAIT_OK);
    for (int mb = 0; mb < micro_batches; mb++)
        for (int k = 0; k < N_LAYERS; k++) {
            assert_int_equal(g_ops->grads_ready(st, N_LAYERS - 1 - k, mb, mb == micro_batches - 1), PLAIT_OK);
            started[mb][k] = g_rec.started;
        }
    assert_int_equal(g_ops->finish_grads(st), PLAIT_OK);
    *at_finish = g_rec.started;
    assert_int_equal(g_rec.waited, g_rec.started); /* every started reduction completed */
    assert_int_equal(g_rec.synchronous, 0);
    *stats = (plait_parallel_stats){.struct_size = sizeof *stats};
    g_ops->step_stats(st, stats);
}

/* ---- tests ---------------------------------------------------------------- */

/* Accumulation 2 and 4, one bucket per layer: the earlier micro-batches
 * start nothing; on the last, layer l's bucket starts with its grads_ready,
 * and all but layer 0's (started by the final call) count as early. */
static void test_accumulation_starts_on_last_micro_batch(void **state) {
    (void)state;
    void *st = make_dp("[parallel.dp]\nbucket_size = 64\n", 0); /* 64 B: one 16-float parameter per bucket */
    for (int m = 2; m <= 4; m += 2)
        for (int step = 0; step < 2; step++) { /* begin_step resets: the second step behaves the same */
            int started[4][N_LAYERS], at_finish;
            plait_parallel_stats stats;
            run_step(st, m, started, &at_finish, &stats);
            for (int mb = 0; mb < m - 1; mb++)
                for (int k = 0; k < N_LAYERS; k++)
                    if (started[mb][k] != 0)
                        fail_msg("accumulation %d: %d all-reduce(s) started during micro-batch %d of %d (layer %d)",
                                 m, started[mb][k], mb, m, N_LAYERS - 1 - k);
            for (int k = 0; k < N_LAYERS; k++) assert_int_equal(started[m - 1][k], k + 1);
            assert_int_equal(at_finish, N_LAYERS);
            assert_int_equal(stats.reductions, N_LAYERS);
            assert_int_equal(stats.early_reductions, N_LAYERS - 1);
            assert_string_equal(g_rec.label, "dp gradient bucket");
            assert_int_equal(g_rec.algo, PLAIT_ALGO_AUTO);
        }
    free_dp(st);
}

/* One bucket holds the whole model: it can only start with the final
 * grads_ready (layer 0 of the last micro-batch), after the whole backward:
 * nothing overlapped. */
static void test_single_bucket_is_not_early(void **state) {
    (void)state;
    void *st = make_dp("", 1); /* the default 25M bucket; deterministic: ordered all-reduce */
    int started[2][N_LAYERS], at_finish;
    plait_parallel_stats stats;
    run_step(st, 2, started, &at_finish, &stats);
    for (int mb = 0; mb < 2; mb++)
        for (int k = 0; k < N_LAYERS; k++) assert_int_equal(started[mb][k], mb == 1 && k == N_LAYERS - 1);
    assert_int_equal(at_finish, 1);
    assert_int_equal(stats.reductions, 1);
    assert_int_equal(stats.early_reductions, 0);
    assert_int_equal(g_rec.algo, PLAIT_ALGO_ORDERED);
    free_dp(st);
}

/* overlap = false: nothing starts during the backward, all in finish_grads. */
static void test_no_overlap_starts_in_finish(void **state) {
    (void)state;
    void *st = make_dp("[parallel.dp]\nbucket_size = 64\noverlap = false\n", 0);
    int started[2][N_LAYERS], at_finish;
    plait_parallel_stats stats;
    run_step(st, 2, started, &at_finish, &stats);
    for (int mb = 0; mb < 2; mb++)
        for (int k = 0; k < N_LAYERS; k++) assert_int_equal(started[mb][k], 0);
    assert_int_equal(at_finish, N_LAYERS);
    assert_int_equal(stats.reductions, N_LAYERS);
    assert_int_equal(stats.early_reductions, 0);
    free_dp(st);
}

/* Layer 3 (the head) holds a tied copy of layer 0's parameter (wte). The
 * copy's gradient is folded into the original's when layer 0's backward is
 * done on the last micro-batch, so layer 0's all-reduce carries the sum and
 * the copy's is never started; deterministic mode reduces both, unfolded. */
static void test_tied_copy_folded_before_reduction(void **state) {
    (void)state;
    g_params[3].flags |= PLAIT_PARAM_TIED_COPY;
    g_params[3].tied_to = 0;
    for (int det = 0; det <= 1; det++) {
        void *st = make_dp("[parallel.dp]\nbucket_size = 64\n", det);
        for (int i = 0; i < N_LAYERS * NUMEL; i++) g_grad[i] = 0.25f * (float)(i % 7) + 1.0f;
        float wte = g_grad[0], head = g_grad[3 * NUMEL];
        int started[2][N_LAYERS], at_finish;
        plait_parallel_stats stats;
        run_step(st, 2, started, &at_finish, &stats);
        assert_int_equal(g_rec.layer0_reduced, 1);
        if (!det) {
            assert_int_equal(at_finish, N_LAYERS - 1); /* the copy's bucket never started */
            assert_int_equal(stats.reductions, N_LAYERS - 1);
            if (g_rec.layer0_sent != wte + head)
                fail_msg("layer 0's all-reduce carried %g, not wte %g + head %g", (double)g_rec.layer0_sent,
                         (double)wte, (double)head);
            for (int k = 0; k < NUMEL; k++) assert_true(g_grad[3 * NUMEL + k] == 0.0f); /* nothing to add twice */
        } else {
            assert_int_equal(at_finish, N_LAYERS);
            assert_true(g_rec.layer0_sent == wte);
            assert_true(g_grad[3 * NUMEL] == head);
        }
        free_dp(st);
    }
    g_params[3].flags &= ~(uint32_t)PLAIT_PARAM_TIED_COPY;
    g_params[3].tied_to = -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accumulation_starts_on_last_micro_batch),
        cmocka_unit_test(test_single_bucket_is_not_early),
        cmocka_unit_test(test_no_overlap_starts_in_finish),
        cmocka_unit_test(test_tied_copy_folded_before_reduction),
    };
    int failed = cmocka_run_group_tests_name("host memory", tests, setup, teardown);
    return failed + cmocka_run_group_tests_name("offset device memory", tests, setup_device, teardown);
}
