/*
 * The optimizer plugins are device-agnostic: adam and zero1/2/3 run on the
 * offset host (tests/support/offset_host.h), whose device memory faults on
 * any host access, so a host loop, memcpy or memset left on tensor data in
 * a plugin crashes this test. Every run is bit-identical to the same run on
 * the plain test host (parameters after every step, the data seen in every
 * hook, gradient norms, the final optimizer state and step count): the
 * kernels and copies a plugin uses on a device compute what its host code
 * did. Covered: deterministic mode with accumulation (the summation tree on
 * device buffers), the default mode, ZeRO-3 under a pipeline hook order
 * with evaluation passes, clipping, checkpoint export (every step) and
 * materialize from a checkpoint with optimizer state (staged host reads).
 * Also checked: the offset device really faults, and a collective on device
 * memory that does not say so is refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "plugin/loader.h"
#include "zero/zero_harness.h"

static zh_model uneven; /* C = 24, V = 37, T = 13: no unit divides by 2 */

static int setup(void **state) {
    (void)state;
    zh_setup_host();
    zh_model_gpt(&uneven, 2, 24, 37, 13);
    return 0;
}

static int teardown(void **state) { return (void)state, plait_plugins_unload_all(), 0; }

/* Run `r` on the plain host and on the offset device; both must agree bit for bit. */
static void same_on_device(zh_run r, zh_snapshot *final_out) {
    zh_run host = r, dev = r;
    host.device = 0;
    dev.device = 1;
    zh_run *both[2] = {&host, &dev};
    for (int k = 0; k < 2; k++)
        if (zh_run_exec(both[k]) != 0)
            fail_msg("%s device=%d n=%d m=%d det=%d: %s", r.plugin, k, r.n, r.m, r.det, zh_run_error(both[k]));
    char why[256];
    for (int s = 0; s < r.steps; s++) {
        if (!zh_snapshot_equal(r.model, &dev.traj[s], &host.traj[s], 0, why, sizeof why))
            fail_msg("%s n=%d m=%d det=%d: step %d on the device differs: %s", r.plugin, r.n, r.m, r.det, s, why);
        if (memcmp(&dev.norm[s], &host.norm[s], sizeof(double)) != 0)
            fail_msg("%s: step %d gradient norm %.17g on the device, %.17g on the host", r.plugin, s, dev.norm[s],
                     host.norm[s]);
        assert_true(host.norm[s] > 0);
        assert_true(dev.lr[s] == host.lr[s]);
    }
    if (!zh_snapshot_equal(r.model, &dev.final, &host.final, 1, why, sizeof why))
        fail_msg("%s n=%d m=%d: final optimizer state on the device differs: %s", r.plugin, r.n, r.m, why);
    assert_int_equal(dev.final.optim_step, r.steps + (r.from ? r.from->optim_step : 0));
    if (final_out) {
        zh_snapshot_alloc(final_out, r.model);
        for (int w = 0; w < ZH_WHICH; w++)
            for (int32_t i = 0; i < r.model->n_params; i++)
                if (final_out->t[w][i])
                    memcpy(final_out->t[w][i], dev.final.t[w][i], zh_numel(&r.model->p[i]) * sizeof(float));
        final_out->optim_step = dev.final.optim_step;
        final_out->have_state = 1;
    }
    zh_run_free(&host);
    zh_run_free(&dev);
}

static const char *const plugins[] = {"adam", "zero1", "zero2", "zero3"};

static void test_every_plugin_on_the_device(void **state) {
    (void)state;
    for (size_t p = 0; p < sizeof plugins / sizeof plugins[0]; p++) {
        /* deterministic with accumulation: ZeRO-2/3 sum in the tree */
        same_on_device((zh_run){.plugin = plugins[p], .model = &uneven, .n = 2, .m = 2, .det = 1, .steps = 3,
                                .grad_clip = 0.5},
                       NULL);
        /* default mode, one micro-batch */
        same_on_device((zh_run){.plugin = plugins[p], .model = &uneven, .n = 2, .m = 1, .steps = 3, .grad_clip = 0.5},
                       NULL);
    }
}

static void test_zero3_pipeline_order(void **state) {
    (void)state;
    same_on_device((zh_run){.plugin = "zero3", .model = &uneven, .n = 2, .m = 3, .det = 1, .steps = 2,
                            .grad_clip = 1.0, .order = ZH_ORDER_1F1B, .eval_passes = 1},
                   NULL);
}

/* State written by one run is read back through the device's staging. */
static void test_resume_from_state(void **state) {
    (void)state;
    zh_snapshot ckpt;
    same_on_device((zh_run){.plugin = "zero2", .model = &uneven, .n = 2, .m = 1, .det = 1, .steps = 2, .grad_clip = 1.0},
                   &ckpt);
    for (size_t p = 0; p < sizeof plugins / sizeof plugins[0]; p++)
        same_on_device((zh_run){.plugin = plugins[p], .model = &uneven, .n = 2, .m = 1, .det = 1, .steps = 2,
                                .first_step = 2, .grad_clip = 1.0, .from = &ckpt},
                       NULL);
    zh_snapshot_free(&ckpt);
}

/* The premise: touching the offset device's memory on the host faults. */
static void test_device_memory_faults(void **state) {
    (void)state;
    const plait_host *h = zh_device_host();
    float *x = h->alloc(16 * sizeof(float), h->device_info->mem_kind, 64, "offset probe");
    assert_non_null(x);
    h->kernels->zero(x, 16); /* through a kernel: fine */
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL); /* cmocka (and ASan) would catch the fault and carry on */
        signal(SIGBUS, SIG_DFL);
        volatile float *v = x;
        v[3] = 1.0f;
        _exit(0); /* reached only if the store did not fault */
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    assert_true(WTERMSIG(status) == SIGSEGV || WTERMSIG(status) == SIGBUS);
    /* a collective on device memory must say so */
    plait_coll_opts host_kind = {.struct_size = sizeof host_kind, .mem_kind = PLAIT_MEM_HOST, .label = "probe"};
    assert_int_equal(h->coll->allreduce(NULL, x, x, 16, PLAIT_F32, PLAIT_SUM, &host_kind, NULL), PLAIT_ERR_INVALID_ARG);
    assert_non_null(strstr(h->last_error(), "device"));
    h->free(x);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_device_memory_faults),
        cmocka_unit_test(test_every_plugin_on_the_device),
        cmocka_unit_test(test_zero3_pipeline_order),
        cmocka_unit_test(test_resume_from_state),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
