/* The nccl plugin tests' harness (nccl_job.h). */
#include "nccl_job.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>

#include "host/host_table.h"
#include "mock_gpu.h"
#include "runtime/error.h"

const plait_plugin_desc *g_desc;
int g_check_collectives;
const plait_comm_device *g_device;
const plait_comm_device *g_device_of[MAXR];
static char *const g_noenv[] = {NULL};

void record_fail(job *j, int line, const char *fmt, ...) {
    pthread_mutex_lock(&j->mu);
    if (j->failures++ == 0) {
        va_list ap;
        va_start(ap, fmt);
        int k = snprintf(j->failure, sizeof j->failure, "line %d: ", line);
        vsnprintf(j->failure + k, sizeof j->failure - (size_t)k, fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&j->mu);
}

plait_config *make_config(const char *text) {
    plait_config *cfg = plait_config_new();
    assert_int_equal(plait_config_declare_core(cfg), PLAIT_OK);
    assert_int_equal(plait_config_declare(cfg, "comm.nccl", g_desc->keys, g_desc->n_keys, g_desc->key_size,
                                          "plugin comm/nccl"),
                     PLAIT_OK);
    if (text) assert_int_equal(plait_config_load_string(cfg, "test.ini", text), PLAIT_OK);
    plait_status st = plait_config_finalize(cfg, g_noenv);
    if (st != PLAIT_OK) fail_msg("config: %s", plait_last_error());
    return cfg;
}

static void rank_main(int rank, void *arg) {
    job *j = arg;
    plait_comm *world = NULL;
    plait_comm_settings settings = j->settings; /* copied by the communicator */
    if (g_device_of[rank]) settings.device = g_device_of[rank];
    plait_status st = plait_threads_world_of(j->w, rank, j->ops, j->cfg[rank], &settings, &world);
    j->init_st[rank] = st;
    if (st != PLAIT_OK) snprintf(j->init_err[rank], sizeof j->init_err[rank], "%s", plait_last_error());
    if (st == PLAIT_OK && j->body) j->body(rank, world, j);
    plait_comm_free(world);
}

void run_job(job *j, int n, const char *text, const char *const *per_rank, body_fn body) {
    memset(j, 0, sizeof *j);
    j->n = n;
    j->w = plait_threads_world_new(n, 20.0);
    assert_non_null(j->w);
    j->ops = g_desc->ops;
    for (int r = 0; r < n; r++) j->cfg[r] = make_config(per_rank ? per_rank[r] : text);
    j->body = body;
    plait_comm_settings_default(&j->settings);
    j->settings.timeout_s = 20.0;
    j->settings.check_collectives = g_check_collectives;
    j->settings.device = g_device;
    pthread_mutex_init(&j->mu, NULL);
    pthread_barrier_init(&j->bar, NULL, (unsigned)n);
    assert_int_equal(plait_threads_run(n, rank_main, j), PLAIT_OK);
    for (int r = 0; r < n; r++) plait_config_free(j->cfg[r]);
    plait_threads_world_free(j->w);
    pthread_barrier_destroy(&j->bar);
    pthread_mutex_destroy(&j->mu);
}

void expect_clean(const job *j) {
    if (j->failures) fail_msg("%d check(s) failed; first: %s", j->failures, j->failure);
    for (int r = 0; r < j->n; r++)
        if (j->init_st[r] != PLAIT_OK) fail_msg("rank %d init: %s", r, j->init_err[r]);
    if (mock_gpu_misuse()) fail_msg("the plugin misused CUDA/NCCL: %s", mock_gpu_misuse_text());
    assert_int_equal(mock_gpu_live_comms(), 0);
    assert_int_equal(mock_gpu_live_allocations(), 0);
}

int setup(void **state) {
    (void)state;
    mock_gpu_reset(4);
    return 0;
}

int teardown(void **state) {
    (void)state;
    mock_gpu_reset(4);
    return 0;
}

void nap(void) {
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
}

const plait_coll_opts dev_opts = {sizeof(plait_coll_opts), PLAIT_ALGO_AUTO, PLAIT_MEM_CUDA, NULL, "test"};

plait_status mock_copy(void *dst, const void *src, size_t bytes, plait_copy_dir dir) {
    (void)dir;
    memcpy(dst, src, bytes);
    return PLAIT_OK;
}

void *mock_alloc(size_t bytes, const char *tag) {
    (void)tag;
    void *p = NULL;
    return cudaMalloc(&p, bytes) == cudaSuccess ? p : NULL;
}

void mock_free(void *p) { cudaFree(p); }

int nccl_job_main(const char *group, const struct CMUnitTest *tests, size_t n) {
    plait_host_install(); /* plugins are handed the core's host table */
    g_desc = plait_plugin_load(PLAIT_KIND_COMM, "nccl");
    if (!g_desc) {
        fprintf(stderr, "cannot load the nccl plugin: %s\n", plait_last_error());
        return 1;
    }
    int rc = _cmocka_run_group_tests(group, tests, n, NULL, NULL);
    plait_plugins_unload_all();
    return rc;
}
