/*
 * The event round trip between the cuda device and the nccl comm plugin,
 * through the core's communicator on one rank: the compute stream's kernels
 * write a buffer, an all-reduce over nccl reads it (the core records a ready
 * event on the compute stream, made by the cuda plugin; the nccl plugin's
 * stream waits for it), and wait_device makes the compute stream wait for the
 * nccl plugin's completion mark (an event of the device, recorded by the nccl
 * plugin on its stream) before the next kernel reads the result. No host
 * thread waits for either stream until the end. Every round's input exists
 * only once its kernel ran, and every result is read only by a kernel, so a
 * missing wait on either side gives wrong sums.
 *
 * The two plugins share one CUDA runtime (the cuda plugin links the shared
 * libcudart, as the nccl plugin does), so the events of one are the other's.
 *
 * PLAIT_TEST_CUDA_PLUGIN names the device plugin (cuda; cuda_emu on the
 * emulator, whose runtime and one-rank NCCL this test then links: its
 * streams run late, so a missing wait fails every time). Exits 77 (skipped,
 * never passed) where the plugin finds no device.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/comm_threads.h"
#include "config/config.h"
#include "device/device.h"
#include "host/host_table.h"
#include "plugin/loader.h"
#include "runtime/error.h"

#define N 65536
#define ROUNDS 4

static int g_fails;

static void check(int ok, const char *what) {
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    if (!ok) g_fails++;
}

typedef struct ctx {
    const plait_comm_ops *ops;
    plait_config *cfg;
    plait_threads_world *w;
    plait_status st;
} ctx;

static plait_status round_trip(plait_comm *world) {
    const plait_host *h = plait_host_table();
    const plait_kernels *k = h->kernels;
    const plait_coll_api *api = h->coll;
    float *host = malloc(N * sizeof *host), *x = h->device->alloc(N * sizeof *x, "round trip x");
    float *y = h->device->alloc(N * sizeof *y, "round trip y"), *z = h->device->alloc(N * sizeof *z, "round trip z");
    plait_status st = host && x && y && z ? PLAIT_OK : plait_set_error(PLAIT_ERR_NO_MEMORY, "round trip buffers");
    for (int i = 0; st == PLAIT_OK && i < N; i++) host[i] = (float)(i % 1000);
    if (st == PLAIT_OK) st = h->device->copy(x, host, N * sizeof *x, PLAIT_COPY_TO_DEVICE);
    if (st == PLAIT_OK) st = h->device->fill_zero(z, N * sizeof *z);
    plait_coll_opts co = {.struct_size = sizeof co, .algo = PLAIT_ALGO_AUTO, .mem_kind = h->device_info->mem_kind,
                          .label = "round trip"};
    for (int r = 0; st == PLAIT_OK && r < ROUNDS; r++) {
        k->scale(x, N, 2.0f); /* the all-reduce's input, written by the compute stream */
        plait_request *req = NULL;
        st = api->allreduce(world, x, y, N, PLAIT_F32, PLAIT_SUM, &co, &req);
        if (st == PLAIT_OK) st = api->wait_device(req);
        k->axpy(z, y, N, 1.0f); /* reads the result on the compute stream */
    }
    if (st == PLAIT_OK) st = h->device->copy(host, z, N * sizeof *z, PLAIT_COPY_TO_HOST);
    size_t wrong = 0, first = N;
    for (int i = 0; st == PLAIT_OK && i < N; i++) /* x0 (2 + 4 + 8 + 16): exact in float */
        if (host[i] != (float)(i % 1000) * 30.0f && !wrong++) first = (size_t)i;
    if (wrong) printf("     %zu of %d sums wrong, the first at %zu: %g, not %g\n", wrong, N, first, host[first],
                      (double)(first % 1000) * 30.0);
    check(st == PLAIT_OK && wrong == 0, "kernels, an all-reduce over nccl and kernels again, ordered by events "
                                        "alone in both directions, give every sum");
    h->device->free(x), h->device->free(y), h->device->free(z);
    free(host);
    return st;
}

static void rank_main(int rank, void *arg) {
    ctx *c = arg;
    plait_comm_settings settings;
    plait_comm_settings_default(&settings);
    settings.timeout_s = 60.0;
    plait_comm *world = NULL;
    plait_status st = plait_threads_world_of(c->w, rank, c->ops, c->cfg, &settings, &world);
    if (st == PLAIT_OK) st = round_trip(world);
    if (st != PLAIT_OK) printf("     %s\n", plait_last_error());
    c->st = st;
    plait_comm_free(world);
}

int main(void) {
    const char *plugin = getenv("PLAIT_TEST_CUDA_PLUGIN") ? getenv("PLAIT_TEST_CUDA_PLUGIN") : "cuda";
    plait_host_install();
    const plait_plugin_desc *nccl = plait_plugin_load(PLAIT_KIND_COMM, "nccl");
    if (!nccl) {
        fprintf(stderr, "FATAL: cannot load the nccl plugin: %s\n", plait_last_error());
        return 1;
    }
    plait_config *cfg = plait_config_new();
    char text[160];
    snprintf(text, sizeof text, "[device]\nplugin = %s\n[comm]\nplugin = nccl\n", plugin);
    static char *const noenv[] = {NULL};
    if (plait_config_declare_core(cfg) != PLAIT_OK ||
        plait_config_declare(cfg, "comm.nccl", nccl->keys, nccl->n_keys, nccl->key_size, "plugin comm/nccl") !=
            PLAIT_OK ||
        plait_config_load_string(cfg, "test.ini", text) != PLAIT_OK || plait_config_finalize(cfg, noenv) != PLAIT_OK) {
        fprintf(stderr, "FATAL: config: %s\n", plait_last_error());
        return 1;
    }
    if (plait_device_open(plait_plugin_host(), cfg, 0, 1) != PLAIT_OK) {
        const char *why = plait_last_error();
        int skip = strstr(why, "no CUDA device") != NULL;
        printf("%s: %s\n", skip ? "SKIP" : "FATAL: open", why);
        plait_config_free(cfg);
        plait_plugins_unload_all();
        return skip ? 77 : 1;
    }
    plait_host_attach_device();
    printf("device: %s; comm: nccl, one rank\n", plait_device_info_open()->name);
    ctx c = {nccl->ops, cfg, plait_threads_world_new(1, 60.0), PLAIT_OK};
    if (!c.w || plait_threads_run(1, rank_main, &c) != PLAIT_OK) check(0, "a one-rank world");
    check(c.st == PLAIT_OK, "the communicator, the operations and the device report no error");
    plait_threads_world_free(c.w);
    plait_device_close();
    plait_host_attach_device();
    plait_config_free(cfg);
    plait_plugins_unload_all();
    printf("%s: %d failure%s\n", g_fails ? "FAILED" : "passed", g_fails, g_fails == 1 ? "" : "s");
    return g_fails ? 1 : 0;
}
