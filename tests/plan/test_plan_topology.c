/*
 * plait plan's links from a node's topology ([node] topology in a cluster
 * file): the node's GPUs placed as a run places its ranks
 * (launch/placement.c, layout/mesh_map.c), tp inside one NVLink island on
 * [intra], a group of one node that leaves an island on [cross], dp across
 * nodes on [inter]; on the shipped DGX H100 (one NVSwitch island), a copy of
 * it split into two islands of four, and the PCIe-only workstation; the
 * refusals name the key's line.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cost/cluster.h"
#include "runtime/error.h"

static char g_text[2048];

/* A cluster of `nodes` x `gpus` H100s over `topology` ("" none). */
static plait_status cluster(int nodes, int gpus, const char *topology, plait_cluster *c) {
    snprintf(g_text, sizeof g_text,
             "[cluster]\nnodes = %d\n[node]\nkind = gpu\ngpus = %d\nmemory = 80G\npeak_gflops = 67000\n"
             "bf16_peak_gflops = 989000\ntopology = %s\n[intra]\nkind = nvlink\nbandwidth = 450\nlatency_us = 3\n"
             "[cross]\nkind = pcie\nbandwidth = 50\nlatency_us = 8\n[inter]\nkind = infiniband\nbandwidth = 50\n"
             "latency_us = 5\n",
             nodes, gpus, topology);
    return plait_cluster_parse("/nowhere/cluster.ini", g_text, c);
}

static const char *src(const char *name) {
    static char path[4][1024];
    static int k;
    k = (k + 1) % 4;
    snprintf(path[k], sizeof path[k], "%s/configs/topologies/%s", getenv("PLAIT_SOURCE_DIR"), name);
    return path[k];
}

static const char *kind(const plait_cluster *c, int ranks, int size, int stride) {
    return plait_cluster_link(c, ranks, size, stride)->kind;
}

static void test_one_island(void **state) {
    (void)state;
    plait_cluster c;
    assert_int_equal(cluster(2, 8, src("dgx-h100.xml"), &c), PLAIT_OK);
    assert_int_equal(c.node_ranks, 8);
    assert_int_equal(c.node_site[5].numa, 1);
    assert_string_equal(kind(&c, 16, 8, 1), "nvlink");     /* tp 8: the node's NVSwitch */
    assert_string_equal(kind(&c, 16, 2, 8), "infiniband"); /* dp 2 over the nodes */
    assert_string_equal(kind(&c, 16, 2, 4), "nvlink");     /* dp 2 x tp 4 on one node */
}

/* dgx-h100.xml with GPUs 4-7 in a second island: a node of two 4-GPU
 * NVLink boards */
static void split_islands(char *path) {
    FILE *in = fopen(src("dgx-h100.xml"), "r");
    int fd = mkstemp(path);
    assert_true(in && fd >= 0);
    FILE *out = fdopen(fd, "w");
    char line[4096];
    int seen = 0;
    while (fgets(line, sizeof line, in)) {
        char *at = strstr(line, "\"NVLinkIsland\" value=\"0\"");
        if (at && seen++ >= 4) at[strlen("\"NVLinkIsland\" value=\"")] = '1';
        fputs(line, out);
    }
    fclose(in);
    fclose(out);
    assert_int_equal(seen, 8);
}

static void test_two_islands(void **state) {
    (void)state;
    char path[] = "/tmp/plait-islands-XXXXXX";
    split_islands(path);
    plait_cluster c;
    assert_int_equal(cluster(2, 8, path, &c), PLAIT_OK);
    assert_int_equal(c.node_site[3].island, 0);
    assert_int_equal(c.node_site[4].island, 1);
    assert_string_equal(kind(&c, 16, 4, 1), "nvlink");     /* tp 4 inside an island */
    assert_string_equal(kind(&c, 16, 8, 1), "pcie");       /* tp 8 leaves it */
    assert_string_equal(kind(&c, 8, 2, 4), "pcie");        /* dp 2 x tp 4 on one node: dp across islands */
    assert_string_equal(kind(&c, 16, 2, 8), "infiniband"); /* dp across nodes */
    assert_string_equal(kind(&c, 16, 2, 2), "nvlink");     /* pairs 2 apart: 0,2 / 1,3 / 4,6 / 5,7 */
    assert_true(plait_cluster_link(&c, 16, 8, 1)->bandwidth < plait_cluster_link(&c, 16, 4, 1)->bandwidth);
    unlink(path);
    /* without a topology every group of a node is on [intra], as before */
    assert_int_equal(cluster(2, 8, "", &c), PLAIT_OK);
    assert_int_equal(c.node_ranks, 0);
    assert_string_equal(kind(&c, 16, 8, 1), "nvlink");
}

static void test_no_nvlink(void **state) {
    (void)state;
    plait_cluster c;
    assert_int_equal(cluster(1, 4, src("workstation-4gpu.xml"), &c), PLAIT_OK);
    assert_string_equal(kind(&c, 4, 2, 1), "pcie");   /* no island known: PCIe */
    assert_string_equal(kind(&c, 4, 1, 1), "nvlink"); /* a group of one talks to nobody */
}

static void test_refusals(void **state) {
    (void)state;
    plait_cluster c;
    assert_int_equal(cluster(1, 4, src("dgx-h100.xml"), &c), PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), "/nowhere/cluster.ini:9"));
    assert_non_null(strstr(plait_last_error(), "has 8 NVIDIA GPUs, but [node] gpus = 4"));
    assert_int_equal(cluster(1, 4, "missing.xml", &c), PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), "[node] topology"));
    assert_non_null(strstr(plait_last_error(), "/nowhere/missing.xml")); /* beside the cluster file */
    snprintf(g_text, sizeof g_text, "[node]\nkind = cpu\ntopology = %s\n", src("cpu-2socket.xml"));
    assert_int_equal(plait_cluster_parse("cpu.ini", g_text, &c), PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), "cpu.ini:3: [node] topology is for kind = gpu"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_island),
        cmocka_unit_test(test_two_islands),
        cmocka_unit_test(test_no_nvlink),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
