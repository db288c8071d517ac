/*
 * The cuda device plugin as built, through the core's loader, on a machine
 * without a GPU (this one and CI): it loads without libcuda, its
 * descriptor passes every check, and probe() / count() / open() refuse with
 * "no CUDA device found (<reason>)" without making a CUDA call in this
 * process (libcuda is never mapped; without driver files nvidia-smi is
 * asked, never in a fork of this process), printing nothing and leaving no
 * thread, child or descriptor behind. A pretend driver tree
 * (PLAIT_CUDA_SYSFS_ROOT, for tests only) checks the counting,
 * CUDA_VISIBLE_DEVICES, device nodes this process cannot open (a
 * container's) and nvidia-smi's list without a GPU.
 *
 * Where a driver exists, the no-GPU checks are replaced by a probe that must
 * succeed: this test never passes by skipping.
 */
#include <dlfcn.h>
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
#include <unistd.h>

#include <cmocka.h>

#include "device/cuda_test_util.h"
#include "host/host_table.h"
#include "plugin/loader.h"
#include "plugin/plugin_check.h"
#include "runtime/error.h"

static const plait_plugin_desc *g_desc;

static const plait_device_ops *ops(void) { return g_desc->ops; }

static int have_nvidia_driver(void) {
    struct stat st;
    return stat("/proc/driver/nvidia/gpus", &st) == 0 || stat("/dev/nvidia0", &st) == 0;
}

static void test_descriptor(void **state) {
    (void)state;
    assert_non_null(g_desc);
    assert_int_equal(plait_check_descriptor(plait_plugin_path(g_desc), g_desc), PLAIT_OK);
    assert_int_equal(g_desc->kind, PLAIT_KIND_DEVICE);
    assert_string_equal(g_desc->name, "cuda");
    assert_int_equal(g_desc->abi_major, 1);
    assert_int_equal(g_desc->abi_minor, 3);
    assert_non_null(strstr(plait_plugin_path(g_desc), "libplait-device-cuda.so"));
    assert_non_null(g_desc->probe);
    assert_int_equal(ops()->struct_size, sizeof(plait_device_ops));
    assert_null(ops()->kernels()); /* nothing before open() */
    for (uint32_t i = 0; i < g_desc->n_keys; i++) {
        const plait_key_decl *p = (const plait_key_decl *)((const char *)g_desc->keys + (size_t)i * g_desc->key_size);
        assert_true(strlen(p->doc) > 20);
    }
    /* loading did not pull in the driver or cuBLASLt */
    assert_false(cuda_test_mapped("libcuda.so"));
    assert_false(cuda_test_mapped("libcublasLt"));
}

static void expect_no_device(plait_status st, const char *msg) {
    assert_int_equal(st, PLAIT_ERR_UNSUPPORTED);
    if (strncmp(msg, "no CUDA device found (", 22) != 0 || strlen(msg) < 30 || msg[strlen(msg) - 1] != ')')
        fail_msg("unexpected message: %s", msg);
}

/* Counted here: fork() called by this process (the plugin's calls land on
 * this definition, exported from the test). A forked child of a process
 * with threads may only make async-signal-safe calls, so counting must not
 * fork; posix_spawn does not come through here. */
static int g_forks;

pid_t fork(void) {
    g_forks++;
    pid_t (*real)(void) = (pid_t (*)(void))dlsym(RTLD_NEXT, "fork");
    return real ? real() : -1;
}

/* probe, count and open on this machine */
static void test_here(void **state) {
    (void)state;
    /* once before counting: a first call may start what stays (OpenBLAS
     * stops its idle threads at a fork of this process, which would show as
     * threads gone; the probe spawns without forking) */
    (void)g_desc->probe(plait_host_table());
    int forks = g_forks;
    cuda_test_quiet q;
    cuda_test_quiet_begin(&q);
    plait_status st = g_desc->probe(plait_host_table());
    char probe_msg[1024];
    snprintf(probe_msg, sizeof probe_msg, "%s", plait_last_error());
    int32_t n = -1;
    plait_status cst = ops()->count(plait_host_table(), &n);
    char count_msg[1024];
    snprintf(count_msg, sizeof count_msg, "%s", plait_last_error());
    long printed;
    int threads, fds;
    cuda_test_quiet_end(&q, &printed, &threads, &fds);
    assert_int_equal(printed, 0);
    assert_int_equal(threads, 0);
    assert_int_equal(fds, 0);
    assert_int_equal(waitpid(-1, NULL, WNOHANG), -1); /* no child left, not even a zombie */
    assert_int_equal(g_forks, forks);                 /* and no fork of this process */
    if (have_nvidia_driver()) {
        assert_int_equal(st, PLAIT_OK);
        assert_int_equal(cst, PLAIT_OK);
        assert_true(n > 0);
        return;
    }
    expect_no_device(st, probe_msg);
    assert_int_equal(cst, PLAIT_OK); /* none found: OK, 0 and the reason (plait/device.h) */
    assert_int_equal(n, 0);
    expect_no_device(PLAIT_ERR_UNSUPPORTED, count_msg);
    assert_non_null(strstr(probe_msg, "/proc/driver/nvidia/gpus"));
    /* nvidia-smi was asked, and the reason says what came of it */
    if (!strstr(probe_msg, "nvidia-smi"))
        fail_msg("the probe did not say what nvidia-smi answered: %s", probe_msg);
    /* open() refuses the same way, before any CUDA call */
    plait_device_open_args args = {sizeof args, NULL, -1, 1, PLAIT_PRECISION_FP32, 1};
    plait_device_info info = {.struct_size = sizeof info};
    expect_no_device(ops()->open(plait_host_table(), &args, &info), plait_last_error());
    assert_null(ops()->kernels());
    assert_null(ops()->alloc(64, "test"));
    assert_false(cuda_test_mapped("libcuda.so"));
}

/* ---- a pretend driver tree ---------------------------------------------- */

static char g_root[64];

static void put(const char *rel, const char *text) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", g_root, rel);
    for (char *p = path + strlen(g_root) + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(path, 0755);
            *p = '/';
        }
    if (!text) {
        mkdir(path, 0755);
        return;
    }
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* The driver's information file of GPU 0000:<bus>:00.0: its UUID
 * (GPU-<uuid4>1111-...; none when NULL) and device minor (none when < 0). */
static void put_gpu(const char *bus, const char *uuid4, int minor) {
    char rel[96], text[256];
    int k = snprintf(text, sizeof text, "Model: \t\t NVIDIA H100 80GB HBM3\n");
    if (uuid4) k += snprintf(text + k, sizeof text - (size_t)k, "GPU UUID: \t GPU-%s1111-2222-3333-4444-555566667777\n", uuid4);
    if (minor >= 0) snprintf(text + k, sizeof text - (size_t)k, "Device Minor: \t %d\n", minor);
    snprintf(rel, sizeof rel, "proc/driver/nvidia/gpus/0000:%s:00.0/information", bus);
    put(rel, text);
}

static int32_t count_with(const char *visible, char *msg, size_t len) {
    if (visible)
        setenv("CUDA_VISIBLE_DEVICES", visible, 1);
    else
        unsetenv("CUDA_VISIBLE_DEVICES");
    int32_t n = -1;
    plait_clear_error();
    plait_status st = ops()->count(plait_host_table(), &n);
    assert_int_equal(st, PLAIT_OK);
    snprintf(msg, len, "%s", n > 0 ? "" : plait_last_error());
    if (n == 0) expect_no_device(PLAIT_ERR_UNSUPPORTED, msg);
    /* probe agrees */
    plait_clear_error();
    assert_int_equal(g_desc->probe(plait_host_table()), n > 0 ? PLAIT_OK : PLAIT_ERR_UNSUPPORTED);
    return n;
}

static void test_pretend_sysfs(void **state) {
    (void)state;
    char *saved_vis = getenv("CUDA_VISIBLE_DEVICES") ? strdup(getenv("CUDA_VISIBLE_DEVICES")) : NULL;
    snprintf(g_root, sizeof g_root, "/tmp/plait-cuda-sysfs-XXXXXX");
    assert_non_null(mkdtemp(g_root));
    setenv("PLAIT_CUDA_SYSFS_ROOT", g_root, 1);
    char msg[1024];

    /* nothing at all */
    assert_int_equal(count_with(NULL, msg, sizeof msg), 0);
    assert_non_null(strstr(msg, "no NVIDIA driver"));
    /* device nodes only (a container without the driver's procfs) */
    put("dev/nvidia0", "");
    put("dev/nvidia1", "");
    put("dev/nvidiactl", "");
    put("dev/nvidia-uvm", "");
    put("dev/nvidia2", NULL); /* a node this process cannot open (a directory here): not a GPU it may use */
    assert_int_equal(count_with(NULL, msg, sizeof msg), 2);
    assert_int_equal(count_with("1", msg, sizeof msg), 1);
    /* the driver's list wins over the nodes; an empty list is no GPU */
    put("proc/driver/nvidia/gpus", NULL);
    assert_int_equal(count_with(NULL, msg, sizeof msg), 0);
    assert_non_null(strstr(msg, "lists no GPU"));
    put_gpu("1b", "aaaa", -1);
    put_gpu("2c", "bbbb", -1);
    put_gpu("3d", NULL, -1);
    assert_int_equal(count_with(NULL, msg, sizeof msg), 3);
    /* CUDA_VISIBLE_DEVICES, as CUDA reads it */
    assert_int_equal(count_with("2", msg, sizeof msg), 1);
    assert_int_equal(count_with("0, 2", msg, sizeof msg), 2);
    assert_int_equal(count_with("0,7,1", msg, sizeof msg), 1);   /* cut at the first unknown entry */
    assert_int_equal(count_with("1,1,0", msg, sizeof msg), 1);   /* a repeat ends the list too */
    assert_int_equal(count_with("GPU-bbbb", msg, sizeof msg), 1); /* a UUID prefix */
    assert_int_equal(count_with("GPU-bbbb1111-2222-3333-4444-555566667777,0", msg, sizeof msg), 2);
    assert_int_equal(count_with("GPU-ffff", msg, sizeof msg), 0);
    assert_non_null(strstr(msg, "CUDA_VISIBLE_DEVICES=\"GPU-ffff\" leaves none of the 3 GPUs visible"));
    assert_int_equal(count_with("", msg, sizeof msg), 0);
    assert_non_null(strstr(msg, "CUDA_VISIBLE_DEVICES=\"\""));
    assert_int_equal(count_with("-1", msg, sizeof msg), 0);
    /* a container's /proc lists the host's GPUs, its runtime gives it the
     * nodes of its own: minors 0 and 1 have nodes here, 2 does not open */
    put_gpu("1b", "aaaa", 2);
    put_gpu("2c", "bbbb", 1);
    put_gpu("3d", NULL, 0);
    assert_int_equal(count_with(NULL, msg, sizeof msg), 2);
    assert_int_equal(count_with("GPU-bbbb", msg, sizeof msg), 1);
    assert_int_equal(count_with("GPU-aaaa", msg, sizeof msg), 0); /* listed, but not this container's */
    put_gpu("2c", "bbbb", 5);
    put_gpu("3d", NULL, 6);
    setenv("NVIDIA_VISIBLE_DEVICES", "3", 1);
    assert_int_equal(count_with(NULL, msg, sizeof msg), 0);
    assert_non_null(strstr(msg, "lists 3 GPUs, but this process can open none of their device nodes"));
    assert_non_null(strstr(msg, "NVIDIA_VISIBLE_DEVICES=\"3\""));
    unsetenv("NVIDIA_VISIBLE_DEVICES");
    put_gpu("2c", "bbbb", 1);
    put_gpu("3d", NULL, 0);
    /* the probe reads the same files and touches no driver */
    setenv("CUDA_VISIBLE_DEVICES", "1", 1);
    assert_int_equal(g_desc->probe(plait_host_table()), PLAIT_OK);
    assert_false(cuda_test_mapped("libcuda.so"));

    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_root);
    assert_int_equal(system(cmd), 0);
    unsetenv("PLAIT_CUDA_SYSFS_ROOT");
    if (saved_vis) setenv("CUDA_VISIBLE_DEVICES", saved_vis, 1);
    else unsetenv("CUDA_VISIBLE_DEVICES");
    free(saved_vis);
}

/* No driver files (WSL's driver exposes none): the GPUs nvidia-smi lists,
 * asked without a fork, from a process that runs threads. */
static void test_driver_without_files(void **state) {
    (void)state;
    snprintf(g_root, sizeof g_root, "/tmp/plait-cuda-sysfs-XXXXXX");
    assert_non_null(mkdtemp(g_root));
    setenv("PLAIT_CUDA_SYSFS_ROOT", g_root, 1);
    put("dev/nvidiactl", "");
    char msg[1024];
    int forks = g_forks;
    assert_int_equal(count_with(NULL, msg, sizeof msg), 0);
    assert_non_null(strstr(msg, "nvidia-smi cannot be run"));
    put("bin/nvidia-smi", "#!/bin/sh\n[ \"$1\" = -L ] || exit 3\n"
                          "echo 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-aaaa1111-2222-3333-4444-555566667777)'\n"
                          "echo 'GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-bbbb1111-2222-3333-4444-555566667777)'\n");
    char path[256];
    snprintf(path, sizeof path, "%s/bin/nvidia-smi", g_root);
    assert_int_equal(chmod(path, 0755), 0);
    assert_int_equal(count_with(NULL, msg, sizeof msg), 2);
    assert_int_equal(count_with("GPU-bbbb", msg, sizeof msg), 1);
    assert_int_equal(count_with("2", msg, sizeof msg), 0);
    assert_int_equal(g_forks, forks);
    assert_int_equal(waitpid(-1, NULL, WNOHANG), -1); /* no child left, not even a zombie */
    put("bin/nvidia-smi", "#!/bin/sh\necho 'NVIDIA-SMI has failed'\nexit 9\n");
    assert_int_equal(chmod(path, 0755), 0);
    assert_int_equal(count_with(NULL, msg, sizeof msg), 0);
    assert_non_null(strstr(msg, "nvidia-smi -L failed (exit status 9)"));
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_root);
    assert_int_equal(system(cmd), 0);
    unsetenv("PLAIT_CUDA_SYSFS_ROOT");
    unsetenv("CUDA_VISIBLE_DEVICES");
}

/* With a pretend GPU but no driver library, open() fails cleanly at its
 * first CUDA call, naming the cause. Last: the CUDA runtime has run. */
static void test_open_without_driver(void **state) {
    (void)state;
    if (have_nvidia_driver()) return; /* covered by the gpu tests there */
    snprintf(g_root, sizeof g_root, "/tmp/plait-cuda-sysfs-XXXXXX");
    assert_non_null(mkdtemp(g_root));
    put("dev/nvidia0", "");
    setenv("PLAIT_CUDA_SYSFS_ROOT", g_root, 1);
    unsetenv("CUDA_VISIBLE_DEVICES");
    plait_device_open_args args = {sizeof args, NULL, 0, 1, PLAIT_PRECISION_BF16, 1};
    plait_device_info info = {.struct_size = sizeof info};
    plait_status st = ops()->open(plait_host_table(), &args, &info);
    expect_no_device(st, plait_last_error());
    assert_non_null(strstr(plait_last_error(), "cudaSetDevice(0)"));
    assert_null(ops()->kernels());
    /* a second open is allowed after a failed one, and fails the same way */
    assert_int_equal(ops()->open(plait_host_table(), &args, &info), PLAIT_ERR_UNSUPPORTED);
    /* [device] ordinal beyond the visible GPUs is a config error */
    args.ordinal = 3;
    assert_int_equal(ops()->open(plait_host_table(), &args, &info), PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), "ordinal 3"));
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_root);
    assert_int_equal(system(cmd), 0);
    unsetenv("PLAIT_CUDA_SYSFS_ROOT");
}

static int setup(void **state) {
    (void)state;
    plait_host_install();
    g_desc = plait_plugin_load(PLAIT_KIND_DEVICE, "cuda");
    if (!g_desc) fprintf(stderr, "%s\n", plait_last_error());
    return g_desc ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_descriptor),
        cmocka_unit_test(test_here),
        cmocka_unit_test(test_pretend_sysfs),
        cmocka_unit_test(test_driver_without_files),
        cmocka_unit_test(test_open_without_driver),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
