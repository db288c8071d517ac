/*
 * The nccl and verbs plugins as built, with the real libcudart / libnccl /
 * libibverbs, through the real loader: every descriptor check passes, the
 * function tables say what the plugins can do, probe answers cleanly
 * (no output, no threads or descriptors left behind), init fails cleanly on
 * a machine without the hardware (every rank, with the reason, quickly),
 * and their [comm.*] keys are validated by the core.
 *
 * Where the hardware exists (an NVIDIA driver, an RDMA device) the probe is
 * expected to succeed instead, and the no-hardware checks are replaced by
 * that one: the test never passes by skipping.
 */
#include <dirent.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "comm/comm.h"
#include "comm/comm_threads.h"
#include "commstate/comm_watchdog.h"
#include "config/config.h"
#include "plugin/loader.h"
#include "plugin/plugin_check.h"
#include "runtime/error.h"
#include "runtime/memory.h"
#include "host/host_table.h"

static char *const g_noenv[] = {NULL};

static int count_dir(const char *path) {
    DIR *d = opendir(path);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* The thread count once exited threads are gone. pthread_join returns when
 * the kernel clears the thread's tid, which happens before the task leaves
 * /proc/self/task, so a joined thread may still be listed for a moment; wait
 * (up to 2 s) for the count to fall to `want`. A thread that really leaked
 * stays and the caller's comparison fails. */
static int settled_thread_count(int want) {
    int n = count_dir("/proc/self/task");
    for (int i = 0; i < 2000 && n > want; i++) {
        nanosleep(&(struct timespec){0, 1000000}, NULL);
        n = count_dir("/proc/self/task");
    }
    return n;
}

#ifdef HAVE_NCCL_PLUGIN
static int have_nvidia_driver(void) {
    struct stat st;
    return stat("/proc/driver/nvidia", &st) == 0 || stat("/dev/nvidia0", &st) == 0;
}
#endif

#ifdef HAVE_VERBS_PLUGIN
static int have_rdma_device(void) { return count_dir("/sys/class/infiniband") > 0; }
#endif

/* Run probe with stdout and stderr captured; returns its status, *printed
 * the number of bytes it wrote, *threads / *fds the change in counts. */
static plait_status quiet_probe(const plait_plugin_desc *d, long *printed, int *threads, int *fds) {
    fflush(stdout);
    fflush(stderr);
    char path[] = "/tmp/plait-probe-XXXXXX";
    int cap = mkstemp(path);
    assert_true(cap >= 0);
    unlink(path);
    int t0 = count_dir("/proc/self/task"), f0 = count_dir("/proc/self/fd");
    int out = dup(1), err = dup(2);
    dup2(cap, 1);
    dup2(cap, 2);
    plait_status st = d->probe(plait_host_table());
    fflush(stdout);
    fflush(stderr);
    dup2(out, 1);
    dup2(err, 2);
    close(out);
    close(err);
    *threads = count_dir("/proc/self/task") - t0;
    *fds = count_dir("/proc/self/fd") - f0;
    *printed = lseek(cap, 0, SEEK_END);
    close(cap);
    return st;
}

static void check_common(const plait_plugin_desc *d, const char *name) {
    assert_non_null(d);
    assert_int_equal(plait_check_descriptor(plait_plugin_path(d), d), PLAIT_OK);
    assert_int_equal(d->kind, PLAIT_KIND_COMM);
    assert_string_equal(d->name, name);
    assert_non_null(strstr(plait_plugin_path(d), "libplait-comm-"));
    assert_non_null(d->probe);
    assert_true(d->n_keys > 0);
    for (uint32_t i = 0; i < d->n_keys; i++) {
        const plait_key_decl *p = (const plait_key_decl *)((const char *)d->keys + (size_t)i * d->key_size);
        assert_non_null(p->doc);
        assert_true(strlen(p->doc) > 20);
    }
    const plait_comm_ops *ops = d->ops;
    assert_int_equal(ops->struct_size, sizeof(plait_comm_ops));
    assert_non_null(ops->abort);
}

typedef struct init_ctx {
    const plait_plugin_desc *d;
    plait_config *cfg;
    plait_threads_world *w;
    plait_status st[2];
    char msg[2][768];
} init_ctx;

static void rank_fn(int rank, void *arg) {
    init_ctx *c = arg;
    plait_comm *world = NULL;
    plait_status st = plait_threads_world_of(c->w, rank, c->d->ops, c->cfg, NULL, &world);
    c->st[rank] = st;
    snprintf(c->msg[rank], sizeof c->msg[rank], "%s", plait_last_error());
    plait_comm_free(world);
}

static void expect_init_fails(const plait_plugin_desc *d, const char *section, const char *needle) {
    /* two ranks on threads, as plait_comm_create_world drives a plugin */
    plait_config *cfg = plait_config_new();
    assert_int_equal(plait_config_declare_core(cfg), PLAIT_OK);
    assert_int_equal(plait_config_declare(cfg, section, d->keys, d->n_keys, d->key_size, "plugin"), PLAIT_OK);
    assert_int_equal(plait_config_finalize(cfg, g_noenv), PLAIT_OK);
    /* the bootstrap's timeout is an hour: a rank that waited for it instead
     * of failing at once would meet ctest's TIMEOUT, or end PLAIT_ERR_TIMEOUT */
    plait_threads_world *w = plait_threads_world_new(2, 3600.0);
    init_ctx ctx = {d, cfg, w, {PLAIT_OK, PLAIT_OK}, {"", ""}};
    /* the watchdog's thread, which a plugin's init starts and keeps for the
     * process, is the core's: counted before, so the count is the plugin's */
    plait_watchdog_start();
    int t0 = count_dir("/proc/self/task");
    assert_int_equal(plait_threads_run(2, rank_fn, &ctx), PLAIT_OK);
    for (int r = 0; r < 2; r++) {
        assert_int_equal(ctx.st[r], PLAIT_ERR_UNSUPPORTED);
        if (!strstr(ctx.msg[r], needle)) fail_msg("rank %d: %s", r, ctx.msg[r]);
    }
    assert_int_equal(settled_thread_count(t0), t0);
    plait_threads_world_free(w);
    plait_config_free(cfg);
}

static void expect_config_error(const plait_plugin_desc *d, const char *section, const char *text,
                                const char *needle) {
    plait_config *cfg = plait_config_new();
    assert_int_equal(plait_config_declare_core(cfg), PLAIT_OK);
    assert_int_equal(plait_config_declare(cfg, section, d->keys, d->n_keys, d->key_size, "plugin"), PLAIT_OK);
    assert_int_equal(plait_config_load_string(cfg, "bad.ini", text), PLAIT_OK);
    assert_int_equal(plait_config_finalize(cfg, g_noenv), PLAIT_ERR_INVALID_CONFIG);
    if (!strstr(plait_last_error(), needle)) fail_msg("expected \"%s\" in: %s", needle, plait_last_error());
    plait_config_free(cfg);
}

static void expect_config_ok(const plait_plugin_desc *d, const char *section, const char *text) {
    plait_config *cfg = plait_config_new();
    assert_int_equal(plait_config_declare_core(cfg), PLAIT_OK);
    assert_int_equal(plait_config_declare(cfg, section, d->keys, d->n_keys, d->key_size, "plugin"), PLAIT_OK);
    assert_int_equal(plait_config_load_string(cfg, "good.ini", text), PLAIT_OK);
    plait_status st = plait_config_finalize(cfg, g_noenv);
    if (st != PLAIT_OK) fail_msg("%s", plait_last_error());
    plait_config_free(cfg);
}

#ifdef HAVE_NCCL_PLUGIN
static void test_nccl(void **state) {
    (void)state;
    const plait_plugin_desc *d = plait_plugin_load(PLAIT_KIND_COMM, "nccl");
    if (!d) fail_msg("%s", plait_last_error());
    check_common(d, "nccl");
    const plait_comm_ops *ops = d->ops;
    assert_int_equal(ops->mem_kinds, PLAIT_MEM_KIND_BIT(PLAIT_MEM_CUDA));
    assert_true(ops->flags & PLAIT_COMM_CUDA_STREAMS);
    assert_non_null(ops->native_coll);
    assert_non_null(ops->native_coll->allreduce);
    assert_non_null(ops->native_coll->reduce_scatter);
    assert_non_null(ops->native_coll->allgather);
    assert_non_null(ops->native_coll->broadcast);
    assert_non_null(ops->native_coll->reduce);
    assert_non_null(ops->native_coll->alltoall);
    assert_non_null(ops->stream_create);
    assert_non_null(ops->stream_sync);
    assert_non_null(ops->stream_destroy);
    assert_null(ops->reg);

    /* The probe counts GPUs from the driver's files and makes no CUDA call
     * (the loader probes in processes that fork ranks later): it opens no
     * descriptor and starts no thread, on a GPU machine too, where the CUDA
     * runtime, once initialised, keeps a dozen descriptors open. Probed
     * once before counting: a first call may start what stays. */
    (void)d->probe(plait_host_table());
    long printed = -1;
    int threads = -1, fds = -1;
    plait_status st = quiet_probe(d, &printed, &threads, &fds);
    assert_int_equal(printed, 0);
    assert_int_equal(fds, 0);
    assert_int_equal(threads, 0);
    assert_int_equal(waitpid(-1, NULL, WNOHANG), -1); /* no child left, not even a zombie */
    if (have_nvidia_driver()) {
        if (st != PLAIT_OK) fail_msg("the nccl probe fails on a machine with an NVIDIA driver: %s", plait_last_error());
        return;
    }
    assert_int_equal(st, PLAIT_ERR_UNSUPPORTED);
    assert_non_null(strstr(plait_last_error(), "no CUDA device found (no NVIDIA driver: "));
    /* the same again: no state was left that changes the answer */
    assert_int_equal(quiet_probe(d, &printed, &threads, &fds), PLAIT_ERR_UNSUPPORTED);
    assert_int_equal(fds, 0);
    expect_init_fails(d, "comm.nccl", "no CUDA device found");

    expect_config_error(d, "comm.nccl", "[comm.nccl]\ndevice = -3\n", "key 'device' in [comm.nccl]: value '-3' is out of range [-1, 1023]");
    expect_config_error(d, "comm.nccl", "[comm.nccl]\npoll_us = 0\n", "poll_us");
    expect_config_error(d, "comm.nccl", "[comm.nccl]\nspin_us = -1\n", "spin_us");
    expect_config_error(d, "comm.nccl", "[comm.nccl]\nnonblocking = maybe\n", "nonblocking");
    expect_config_error(d, "comm.nccl", "[comm.nccl]\ndevcie = 1\n", "devcie");
    expect_config_ok(d, "comm.nccl", "[comm.nccl]\ndevice = 3\nnet = IB\npoll_us = 50\nspin_us = 0\nnonblocking = false\n");
}
#endif

#ifdef HAVE_VERBS_PLUGIN
static void test_verbs(void **state) {
    (void)state;
    const plait_plugin_desc *d = plait_plugin_load(PLAIT_KIND_COMM, "verbs");
    if (!d) fail_msg("%s", plait_last_error());
    check_common(d, "verbs");
    const plait_comm_ops *ops = d->ops;
    assert_int_equal(ops->mem_kinds, PLAIT_MEM_KIND_BIT(PLAIT_MEM_HOST) | PLAIT_MEM_KIND_BIT(PLAIT_MEM_HOST_PINNED));
    assert_non_null(ops->reg);
    assert_non_null(ops->dereg);
    assert_null(ops->native_coll);

    long printed = -1;
    int threads = -1, fds = -1;
    plait_status st = quiet_probe(d, &printed, &threads, &fds);
    assert_int_equal(printed, 0);
    assert_int_equal(threads, 0);
    assert_int_equal(fds, 0);
    if (have_rdma_device()) {
        /* a device: usable, or its port named as not active */
        if (st != PLAIT_OK) assert_non_null(strstr(plait_last_error(), "no RDMA device with an active port ("));
        return;
    }
    assert_int_equal(st, PLAIT_ERR_UNSUPPORTED);
    assert_non_null(strstr(plait_last_error(), "no RDMA device found (ibv_get_device_list: "));
    expect_init_fails(d, "comm.verbs", "no RDMA device found");

    expect_config_error(d, "comm.verbs", "[comm.verbs]\nport = 300\n", "key 'port' in [comm.verbs]");
    expect_config_error(d, "comm.verbs", "[comm.verbs]\neager_max = 10\n", "eager_max");
    expect_config_error(d, "comm.verbs", "[comm.verbs]\nretry_cnt = 8\n", "retry_cnt");
    expect_config_error(d, "comm.verbs", "[comm.verbs]\ngid_index = -2\n", "gid_index");
    expect_config_ok(d, "comm.verbs", "[comm.verbs]\ndevice = mlx5_0:1\ngid_index = 3\neager_max = 16K\nsl = 3\n");
}
#endif

int main(void) {
    plait_host_install(); /* plugins are handed the core's host table */
    const struct CMUnitTest tests[] = {
#ifdef HAVE_NCCL_PLUGIN
        cmocka_unit_test(test_nccl),
#endif
#ifdef HAVE_VERBS_PLUGIN
        cmocka_unit_test(test_verbs),
#endif
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    plait_plugins_unload_all();
    return rc;
}
