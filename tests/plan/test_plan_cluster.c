/*
 * The cluster file of `plait plan` (CLUSTER.ini): the shipped examples, the
 * precision a cluster plans in and its rate, errors with FILE:LINE and the
 * allowed values, and the links fitted to a `plait bench comm --csv` table.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include <cmocka.h>

#include "cost/cluster.h"
#include "cost/cost.h"
#include "runtime/error.h"

#include "plan_fixtures.h"

static void test_cluster_examples(void **state) {
    (void)state;
    plait_cluster c;
    assert_int_equal(plait_cluster_load(source_path("configs/clusters/dgx-a100.ini"), &c), PLAIT_OK);
    assert_true(c.gpu && c.nodes == 1 && c.units_per_node == 8);
    NEAR(c.memory, 80.0 * 1024 * 1024 * 1024);
    NEAR(c.peak_flops, 19.5e12);
    NEAR(c.intra.bandwidth, 300e9);
    assert_string_equal(c.intra.kind, "nvlink");
    assert_int_equal(plait_cluster_check_ranks(&c, 8), PLAIT_OK);
    assert_int_equal(plait_cluster_check_ranks(&c, 16), PLAIT_ERR_INVALID_CONFIG);
    assert_int_equal(plait_cluster_load(source_path("configs/clusters/dgx-a100-2node.ini"), &c), PLAIT_OK);
    assert_true(c.nodes == 2 && !strcmp(c.inter.kind, "infiniband"));
    NEAR(c.inter.bandwidth, 25e9);
    /* 16 ranks, tp innermost: a TP group of 8 stays on NVLink, the DP pair
     * of ranks 8 apart crosses the network */
    assert_ptr_equal(plait_cluster_link(&c, 16, 8, 1), &c.intra);
    assert_ptr_equal(plait_cluster_link(&c, 16, 2, 8), &c.inter);
    assert_int_equal(plait_cluster_load(source_path("configs/clusters/this-machine.ini"), &c), PLAIT_OK);
    assert_true(!c.gpu && c.units_per_node >= 1 && c.memory > 0 && c.peak_flops == 0);
}

/* the precision a cluster plans in, and its rate in it */
static void test_cluster_precision(void **state) {
    (void)state;
    plait_cluster c;
    double rate;
    assert_int_equal(plait_cluster_load(source_path("configs/clusters/dgx-a100.ini"), &c), PLAIT_OK);
    assert_int_equal(c.precision, PLAIT_PRECISION_BF16);
    assert_int_equal(plait_cluster_rate(&c, PLAIT_PRECISION_BF16, &rate), PLAIT_OK);
    NEAR(rate, 312e12 * 0.55);
    assert_int_equal(plait_cluster_rate(&c, PLAIT_PRECISION_FP32, &rate), PLAIT_OK);
    NEAR(rate, 19.5e12 * 0.6);
    assert_int_equal(plait_cluster_rate(&c, PLAIT_PRECISION_TF32, &rate), PLAIT_OK);
    NEAR(rate, 156e12 * 0.6); /* no tf32_efficiency: the fp32 one */
    /* a CPU node plans in fp32; bf16 without a bf16 peak is its fp32 rate */
    assert_int_equal(plait_cluster_parse("cpu.ini", "[node]\ncores = 2\npeak_gflops = 100\n", &c), PLAIT_OK);
    assert_int_equal(c.precision, PLAIT_PRECISION_FP32);
    assert_int_equal(plait_cluster_rate(&c, PLAIT_PRECISION_BF16, &rate), PLAIT_OK);
    NEAR(rate, 100e9 * 0.8);
    /* a GPU cluster without the rate of its precision: the file and the key */
    const char *gpu = "[node]\nkind = gpu\ngpus = 8\nmemory = 80G\npeak_gflops = 19500\n";
    assert_int_equal(plait_cluster_parse("gpu.ini", gpu, &c), PLAIT_OK);
    assert_int_equal(c.precision, PLAIT_PRECISION_BF16);
    assert_int_equal(plait_cluster_rate(&c, PLAIT_PRECISION_BF16, &rate), PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), "gpu.ini: [node] bf16_peak_gflops is not given"));
    /* precision = fp32 in the file plans it in fp32 */
    assert_int_equal(plait_cluster_parse("gpu.ini",
                                         "[node]\nkind = gpu\ngpus = 8\nmemory = 80G\npeak_gflops = 19500\n"
                                         "precision = fp32\n",
                                         &c),
                     PLAIT_OK);
    assert_int_equal(c.precision, PLAIT_PRECISION_FP32);
    /* a file that sets no key (empty, comments, a header alone): refused
     * naming it, not planned as this machine under its name */
    assert_int_equal(plait_cluster_parse("empty.ini", "", &c), PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), "empty.ini: the cluster file sets no key"));
    assert_int_equal(plait_cluster_parse("comments.ini", "# nodes = 2\n; [node]\n\n", &c), PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), "comments.ini: the cluster file sets no key"));
    assert_int_equal(plait_cluster_parse("header.ini", "[node]\n", &c), PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), "header.ini: the cluster file sets no key"));
    /* GPUs without kind = gpu: refused naming the line, not planned as
     * this machine's cores */
    assert_int_equal(plait_cluster_parse("gpus.ini", "[node]\ngpus = 8\nmemory = 80G\n", &c), PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), "gpus.ini:2: [node] gpus describes GPU nodes, but [node] kind is "
                                               "cpu (the default): add kind = gpu"));
    assert_int_equal(plait_cluster_parse("gpus.ini", "[node]\nkind = cpu\ngpus = 8\n", &c), PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), "kind is cpu (gpus.ini:2)"));
    assert_int_equal(plait_cluster_parse("gpus.ini", "[node]\ngpus = 0\n", &c), PLAIT_ERR_INVALID_CONFIG);
    /* and cores on GPU nodes */
    assert_int_equal(plait_cluster_parse("cores.ini",
                                         "[node]\nkind = gpu\ngpus = 8\ncores = 64\nmemory = 80G\n"
                                         "peak_gflops = 19500\n",
                                         &c),
                     PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), "cores.ini:4: [node] cores describes CPU nodes, but [node] kind is gpu "
                                               "(cores.ini:2): leave it out"));
    /* the GPUs' rate by product width on CPU nodes */
    assert_int_equal(plait_cluster_parse("width.ini", "[node]\ncores = 4\nhalf_rate_width = 650\n", &c),
                     PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), "width.ini:3: [node] half_rate_width describes GPU nodes"));
    /* the attention's rate likewise, and read where it belongs */
    assert_int_equal(plait_cluster_parse("att.ini", "[node]\ncores = 4\nbf16_attention_efficiency = 0.2\n", &c),
                     PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), "att.ini:3: [node] bf16_attention_efficiency describes GPU nodes"));
    assert_int_equal(plait_cluster_parse("att.ini",
                                         "[node]\nkind = gpu\ngpus = 8\nmemory = 80G\npeak_gflops = 67000\n"
                                         "bf16_peak_gflops = 989000\nbf16_attention_efficiency = 0.2\n",
                                         &c),
                     PLAIT_OK);
    assert_true(fabs(plait_cluster_attention_rate(&c, PLAIT_PRECISION_BF16) - 0.2 * 989e12) < 1);
    assert_true(plait_cluster_attention_rate(&c, PLAIT_PRECISION_TF32) == 0);
    assert_int_equal(plait_cluster_parse("att.ini", "[node]\nkind = gpu\nbf16_attention_efficiency = 2\n", &c),
                     PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), "att.ini:3"));
    /* one key is enough: the rest default */
    assert_int_equal(plait_cluster_parse("one.ini", "[cluster]\nnodes = 1\n", &c), PLAIT_OK);
    /* a wrong precision: FILE:LINE and the allowed values */
    assert_int_equal(plait_cluster_parse("gpu.ini", "[node]\nprecision = fp8\n", &c), PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), "gpu.ini:2"));
    assert_non_null(strstr(plait_last_error(), "bf16"));
}

static void test_cluster_errors(void **state) {
    (void)state;
    char path[] = "/tmp/plait-cluster-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *text = "[cluster]\nnodes = 2\n[node]\nkind = tpu\nefficiency = 2\n[intra]\nbandwith = 3\n";
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    plait_cluster c;
    assert_int_equal(plait_cluster_load(path, &c), PLAIT_ERR_INVALID_CONFIG);
    const char *e = plait_last_error();
    char want[1100];
    snprintf(want, sizeof want, "%s:4", path); /* kind = tpu, with the allowed kinds */
    assert_non_null(strstr(e, want));
    assert_non_null(strstr(e, "cpu"));
    assert_non_null(strstr(e, "gpu"));
    snprintf(want, sizeof want, "%s:5", path); /* efficiency out of range */
    assert_non_null(strstr(e, want));
    snprintf(want, sizeof want, "%s:7", path); /* a misspelt key */
    assert_non_null(strstr(e, want));
    assert_non_null(strstr(e, "bandwidth"));
    /* two nodes need a network */
    fd = open(path, O_WRONLY | O_TRUNC);
    text = "[cluster]\nnodes = 2\n";
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    assert_int_equal(plait_cluster_load(path, &c), PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), "[inter]"));
    unlink(path);
    assert_int_equal(plait_cluster_load("/nonexistent/cluster.ini", &c) == PLAIT_OK, 0);
    assert_non_null(strstr(plait_last_error(), "/nonexistent/cluster.ini"));
}

static void test_fit_comm(void **state) {
    (void)state;
    char path[] = "/tmp/plait-comm-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    /* a bench comm table of a ring with alpha = 20 us, beta = 2 GB/s over
     * 4 ranks (and a broadcast row the fit must ignore) */
    fprintf(f, "op,ranks,transport,algo,dtype,redop,size_bytes,count,time_us,time_min_us,algbw_GBps,busbw_GBps,"
               "wrong,loop_us\n");
    for (double S = 4096; S <= 64 << 20; S *= 4)
        fprintf(f, "allreduce,4,tcp,ring,f32,sum,%.0f,%.0f,%.6f,0,0,0,0,0\n", S, S / 4,
                1e6 * (6 * 20e-6 + 1.5 * S / 2e9));
    fprintf(f, "broadcast,4,tcp,tree,f32,sum,4096,1024,99999,0,0,0,0,0\n");
    fclose(f);
    plait_cluster c = gpu_cluster();
    assert_int_equal(plait_cluster_fit_comm(&c, path), PLAIT_OK);
    assert_true(fabs(c.intra.latency - 20e-6) < 1e-9);
    assert_true(fabs(c.intra.bandwidth - 2e9) < 1e3);
    f = fopen(path, "w");
    fprintf(f, "size,time\n1,2\n");
    fclose(f);
    assert_int_equal(plait_cluster_fit_comm(&c, path), PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), ":1: not a 'plait bench comm --csv' table"));
    /* a time that overflows to infinity, or a row longer than any buffer:
     * named with its line, never fitted */
    f = fopen(path, "w");
    fprintf(f, "op,ranks,size_bytes,time_us\nallreduce,4,4096,1e999\n");
    fclose(f);
    assert_int_equal(plait_cluster_fit_comm(&c, path), PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), ":2: an allreduce row needs numbers"));
    f = fopen(path, "w");
    fprintf(f, "op,ranks,size_bytes,time_us\nallreduce,4,4096,10\nallreduce,4,");
    for (int i = 0; i < 5000; i++) fputc('9', f);
    fprintf(f, ",20\n");
    fclose(f);
    assert_int_equal(plait_cluster_fit_comm(&c, path), PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), ":3: an allreduce row needs numbers"));
    unlink(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cluster_examples),
        cmocka_unit_test(test_cluster_errors),
        cmocka_unit_test(test_fit_comm),
        cmocka_unit_test(test_cluster_precision),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
