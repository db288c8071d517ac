/*
 * The node's topology from hwloc XML files (launch/topology.h) and the ranks
 * placed on it (launch/placement.h), on the three nodes of
 * configs/topologies/: a DGX H100 (each GPU's rank on its socket's threads,
 * the ConnectX-7 on its PCIe switch, never the management card), a PCIe-only
 * 4-GPU workstation and a two-socket CPU node (ranks in blocks over the
 * sockets, cores of their own); auto leaves an oversubscribed run unbound and
 * cores refuses it; a user's mask is kept, and one that excludes the GPU's
 * node re-chooses the GPU near it, or, for a GPU the user fixed, is a
 * warning naming the rank and the cores; the comm plugins' card is the one
 * on the GPU's switch; a topology file that does not parse is refused
 * naming it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "comm/comm_job.h"
#include "config/config.h"
#include "launch/bind.h"
#include "launch/placement.h"
#include "launch/topology.h"
#include "layout/mesh_map.h"
#include "runtime/error.h"

static plait_topology *load(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/configs/topologies/%s", getenv("PLAIT_SOURCE_DIR"), name);
    plait_topology *t = NULL;
    if (plait_topology_load(path, &t) != PLAIT_OK) fail_msg("%s", plait_last_error());
    return t;
}

static const char *cpus(const plait_rank_place *p) {
    static char buf[4][256];
    static int k;
    k = (k + 1) % 4;
    return plait_cpuset_text(&p->cpus, buf[k], sizeof buf[k]);
}

static void place(const plait_topology *t, int ranks, int threads, plait_bind_mode mode, int gpus,
                  const plait_cpuset *mask, const int *gpu_of, plait_rank_place *out) {
    plait_placement_in in = {.topo = t,
                             .local_ranks = ranks,
                             .threads = threads,
                             .mode = mode,
                             .use_gpus = gpus,
                             .start_mask = mask,
                             .gpu_of_rank = gpu_of};
    if (plait_place_ranks(&in, out) != PLAIT_OK) fail_msg("%s", plait_last_error());
}

static void test_dgx_read(void **state) {
    (void)state;
    plait_topology *t = load("dgx-h100.xml");
    assert_int_equal(t->n_packages, 2);
    assert_int_equal(t->n_numa, 2);
    assert_int_equal(t->n_cores, 112);
    assert_int_equal(t->n_pus, 224);
    assert_int_equal(t->n_gpus, 8);
    assert_int_equal(t->n_nics, 9);
    assert_string_equal(t->gpus[0].pci, "0000:18:00.0");
    assert_int_equal(t->gpus[0].at.numa, 0);
    assert_int_equal(t->gpus[4].at.numa, 1);
    assert_int_equal(t->gpus[7].island, 0);
    assert_string_equal(t->gpus[0].at.bridge, "0000:16:00.0");
    assert_string_equal(t->nics[0].rdma, "mlx5_0");
    assert_string_equal(t->nics[0].ifname, "ibp23s0");
    assert_string_equal(t->nics[0].at.bridge, "0000:16:00.0");
    assert_int_equal(t->nics[0].speed_mbps, 400000);
    assert_int_equal(t->cores[0].n_pus, 2);
    assert_int_equal(t->cores[0].pus[1], 112);
    plait_topology_free(t);
}

static void test_dgx_gpu_ranks(void **state) {
    (void)state;
    plait_topology *t = load("dgx-h100.xml");
    plait_rank_place p[8];
    place(t, 8, 14, PLAIT_BIND_AUTO, 1, NULL, NULL, p);
    for (int r = 0; r < 8; r++) {
        assert_int_equal(p[r].bound, 1);
        assert_int_equal(p[r].gpu, r);
        assert_string_equal(cpus(&p[r]), r < 4 ? "0-55,112-167" : "56-111,168-223");
        char want[16];
        snprintf(want, sizeof want, "mlx5_%d", r);
        assert_string_equal(t->nics[p[r].nic].rdma, want); /* its switch's card, never mlx5_8 */
    }
    place(t, 8, 7, PLAIT_BIND_CORES, 1, NULL, NULL, p);
    assert_string_equal(cpus(&p[0]), "0-6");
    assert_string_equal(cpus(&p[3]), "21-27");
    assert_string_equal(cpus(&p[4]), "56-62");
    /* two ranks per GPU: the same card */
    plait_rank_place q[16];
    place(t, 16, 1, PLAIT_BIND_NUMA, 1, NULL, NULL, q);
    assert_int_equal(q[9].gpu, 1);
    assert_int_equal(q[9].nic, q[1].nic);
    /* GPUs in reverse (CUDA_VISIBLE_DEVICES=7,...,0): each rank still gets its GPU's card */
    const int rev[8] = {7, 6, 5, 4, 3, 2, 1, 0};
    place(t, 8, 7, PLAIT_BIND_NUMA, 1, NULL, rev, p);
    assert_string_equal(t->nics[p[0].nic].rdma, "mlx5_7");
    assert_string_equal(t->nics[p[6].nic].rdma, "mlx5_1");
    assert_string_equal(cpus(&p[0]), "56-111,168-223");
    plait_topology_free(t);
}

static void test_oversubscribed(void **state) {
    (void)state;
    plait_topology *t = load("dgx-h100.xml");
    plait_rank_place p[8];
    place(t, 8, 16, PLAIT_BIND_AUTO, 1, NULL, NULL, p);
    assert_int_equal(p[0].bound, 0);
    assert_non_null(strstr(p[0].note, "not bound"));
    assert_non_null(strstr(p[0].note, "112 cores"));
    plait_placement_in in = {.topo = t, .local_ranks = 8, .threads = 16, .mode = PLAIT_BIND_CORES, .use_gpus = 1};
    assert_int_equal(plait_place_ranks(&in, p), PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), "bind = cores"));
    assert_non_null(strstr(plait_last_error(), "8 ranks x 16 math threads = 128"));
    assert_non_null(strstr(plait_last_error(), "112 cores"));
    plait_topology_free(t);
}

static void test_user_mask(void **state) {
    (void)state;
    plait_topology *t = load("dgx-h100.xml");
    plait_cpuset mask;
    memset(&mask, 0, sizeof mask);
    for (int c = 56; c < 112; c++) plait_cpuset_add(&mask, c); /* socket 1 only */
    plait_rank_place p[8];
    place(t, 8, 1, PLAIT_BIND_CORES, 1, &mask, NULL, p);
    assert_int_equal(p[0].bound, 0);
    assert_string_equal(cpus(&p[0]), "56-111");
    assert_int_equal(p[0].warn, 0); /* its GPU re-chosen near the mask (test_mask_rechooses_gpu) */
    assert_int_equal(p[5].warn, 0); /* GPU 5 is on socket 1: kept, said */
    assert_non_null(strstr(p[5].note, "kept"));
    plait_topology_free(t);
}

/* A mask that excludes the GPU's node: the GPU is re-chosen near the
 * allowed cores, each on the NIC of its own switch; an explicit GPU wins
 * and warns. */
static void test_mask_rechooses_gpu(void **state) {
    (void)state;
    plait_topology *t = load("dgx-h100.xml");
    plait_cpuset mask;
    memset(&mask, 0, sizeof mask);
    for (int c = 56; c < 112; c++) plait_cpuset_add(&mask, c); /* socket 1 only (taskset -c 56-111) */
    plait_rank_place p[8];
    place(t, 4, 1, PLAIT_BIND_AUTO, 1, &mask, NULL, p);
    for (int r = 0; r < 4; r++) {
        assert_int_equal(p[r].gpu, 4 + r);
        assert_int_equal(p[r].gpu_default, r);
        assert_int_equal(p[r].warn, 0);
        assert_int_equal(p[r].numa, 1);
        assert_string_equal(cpus(&p[r]), "56-111");
        char want[16];
        snprintf(want, sizeof want, "mlx5_%d", 4 + r);
        assert_string_equal(t->nics[p[r].nic].rdma, want);
    }
    assert_non_null(strstr(p[1].note, "cpus 56-111"));
    assert_non_null(strstr(p[1].note, "GPU gpu5 "));
    assert_non_null(strstr(p[1].note, "instead of gpu1, whose NUMA node 0 it excludes"));
    /* 8 ranks on socket 1: those of GPUs 4-7 keep them, the others share them */
    place(t, 8, 1, PLAIT_BIND_AUTO, 1, &mask, NULL, p);
    for (int r = 0; r < 8; r++) assert_int_equal(p[r].gpu, 4 + r % 4);
    /* CUDA_VISIBLE_DEVICES=0,1,2,3 (or an ordinal): kept, with a warning naming the rank and the cores */
    const int fixed[4] = {0, 1, 2, 3};
    place(t, 4, 1, PLAIT_BIND_AUTO, 1, &mask, fixed, p);
    assert_int_equal(p[2].gpu, 2);
    assert_int_equal(p[2].warn, 1);
    assert_non_null(strstr(p[2].note, "local rank 2"));
    assert_non_null(strstr(p[2].note, "cpus 56-111"));
    assert_non_null(strstr(p[2].note, "fixed by [device] ordinal or CUDA_VISIBLE_DEVICES"));
    /* each rank its own mask (srun --cpu-bind=cores, sockets in turn): every
     * rank computes the same GPUs, one per rank */
    plait_cpuset own[8];
    memset(own, 0, sizeof own);
    for (int r = 0; r < 8; r++) plait_cpuset_add(&own[r], r % 2 ? 56 + r : r);
    plait_placement_in in = {
        .topo = t, .local_ranks = 8, .threads = 1, .mode = PLAIT_BIND_AUTO, .use_gpus = 1, .start_masks = own};
    assert_int_equal(plait_place_ranks(&in, p), PLAIT_OK);
    int seen = 0;
    for (int r = 0; r < 8; r++) {
        assert_int_equal(t->gpus[p[r].gpu].at.numa, r % 2);
        seen |= 1 << p[r].gpu;
    }
    assert_int_equal(seen, 0xff);
    plait_topology_free(t);
}

/* The comm plugins' card from the place: on a DGX H100 in a job of several
 * hosts, rank k's [comm.tcp] ifname and [comm.verbs] device are the card
 * on its GPU's PCIe switch, unless the user set them. */
static void test_comm_card(void **state) {
    (void)state;
    static const plait_key_decl tcp_keys[] = {
        {sizeof(plait_key_decl), 0, "ifname", PLAIT_KEY_STRING, "", 1, 0, NULL, "interface"}};
    static const plait_key_decl verbs_keys[] = {
        {sizeof(plait_key_decl), 0, "device", PLAIT_KEY_STRING, "", 1, 0, NULL, "RDMA device"}};
    static char *const no_env[] = {NULL};
    plait_topology *t = load("dgx-h100.xml");
    plait_rank_place p[8];
    place(t, 8, 14, PLAIT_BIND_AUTO, 1, NULL, NULL, p);
    for (int r = 0; r < 8; r++) {
        plait_bind_result card = {.gpu_ordinal = -1};
        plait_bind_comm_card(t, &p[r], &card);
        assert_string_equal(card.ifname, t->nics[r].ifname);
        assert_string_equal(card.rdma, t->nics[r].rdma);
        assert_string_equal(t->nics[r].at.bridge, t->gpus[r].at.bridge);
        plait_config *cfg = plait_config_new();
        assert_int_equal(plait_config_declare_core(cfg), PLAIT_OK);
        assert_int_equal(plait_config_declare(cfg, "comm.tcp", tcp_keys, 1, sizeof tcp_keys[0], "tcp"), PLAIT_OK);
        assert_int_equal(plait_config_declare(cfg, "comm.verbs", verbs_keys, 1, sizeof verbs_keys[0], "v"), PLAIT_OK);
        if (r == 7) assert_int_equal(plait_config_add_override(cfg, "comm.verbs.device=mlx5_8"), PLAIT_OK);
        assert_int_equal(plait_config_finalize(cfg, no_env), PLAIT_OK);
        assert_int_equal(plait_comm_nearest_card_defaults(cfg, &card, r), PLAIT_OK);
        assert_string_equal(plait_config_str(cfg, "comm.tcp", "ifname"), t->nics[r].ifname);
        assert_string_equal(plait_config_str(cfg, "comm.verbs", "device"), r == 7 ? "mlx5_8" : t->nics[r].rdma);
        assert_int_equal(plait_config_origin(cfg, "comm.tcp", "ifname", NULL), PLAIT_ORIGIN_DERIVED);
        plait_config_free(cfg);
    }
    assert_string_equal(t->nics[3].rdma, "mlx5_3");
    plait_topology_free(t);
}

static void test_workstation(void **state) {
    (void)state;
    plait_topology *t = load("workstation-4gpu.xml");
    assert_int_equal(t->n_gpus, 4);
    assert_int_equal(t->gpus[2].island, -1);
    assert_string_equal(t->gpus[3].pci, "0000:61:00.0");
    plait_rank_place p[4];
    place(t, 4, 8, PLAIT_BIND_AUTO, 1, NULL, NULL, p);
    for (int r = 0; r < 4; r++) {
        assert_int_equal(p[r].gpu, r);
        assert_string_equal(cpus(&p[r]), "0-63");
        assert_string_equal(t->nics[p[r].nic].ifname, "enp129s0");
    }
    const int fixed[4] = {3, 2, 1, 0}; /* CUDA_VISIBLE_DEVICES=3,2,1,0 */
    place(t, 4, 8, PLAIT_BIND_CORES, 1, NULL, fixed, p);
    assert_int_equal(p[0].gpu, 3);
    assert_string_equal(cpus(&p[0]), "0-7");
    assert_string_equal(cpus(&p[3]), "24-31");
    plait_topology_free(t);
}

static void test_cpu_node(void **state) {
    (void)state;
    plait_topology *t = load("cpu-2socket.xml");
    assert_int_equal(t->n_gpus, 0);
    assert_int_equal(t->n_numa, 2);
    plait_rank_place p[4];
    place(t, 4, 8, PLAIT_BIND_AUTO, 0, NULL, NULL, p);
    assert_string_equal(cpus(&p[0]), "0-7");
    assert_string_equal(cpus(&p[1]), "8-15");
    assert_string_equal(cpus(&p[2]), "32-39");
    assert_string_equal(cpus(&p[3]), "40-47");
    assert_int_equal(p[2].numa, 1);
    assert_int_equal(p[2].gpu, -1);
    assert_string_equal(t->nics[p[3].nic].ifname, "ens1f0");
    place(t, 4, 8, PLAIT_BIND_NUMA, 0, NULL, NULL, p);
    assert_string_equal(cpus(&p[1]), "0-31,64-95");
    assert_string_equal(cpus(&p[2]), "32-63,96-127");
    place(t, 1, 8, PLAIT_BIND_AUTO, 0, NULL, NULL, p); /* one CPU process alone: left where it is */
    assert_int_equal(p[0].bound, 0);
    assert_non_null(strstr(p[0].note, "one CPU rank alone"));
    place(t, 1, 8, PLAIT_BIND_CORES, 0, NULL, NULL, p);
    assert_string_equal(cpus(&p[0]), "0-7");
    place(t, 4, 8, PLAIT_BIND_NONE, 0, NULL, NULL, p);
    assert_int_equal(p[0].bound, 0);
    assert_string_equal(cpus(&p[0]), "0-127");
    plait_topology_free(t);
}

/* The sites of `hosts` hosts like `t`, each with `local` ranks placed as p. */
static const char *map(const plait_topology *t, const plait_rank_place *p, int local, int hosts, int dp, int tp,
                       int pp) {
    static char text[1024];
    plait_rank_site site[64];
    plait_mesh_sites(t, p, local, NULL, local * hosts, site);
    int sizes[PLAIT_MESH_AXES] = {
        [PLAIT_AXIS_DP] = dp, [PLAIT_AXIS_TP] = tp, [PLAIT_AXIS_PP] = pp, [PLAIT_AXIS_CP] = 1};
    int axes[PLAIT_MESH_AXES];
    assert_int_equal(plait_mesh_parse_order("tp,dp,pp", axes), PLAIT_OK);
    return plait_mesh_map_text(sizes, axes, site, text, sizeof text);
}

static void test_mesh_map(void **state) {
    (void)state;
    plait_topology *t = load("dgx-h100.xml");
    plait_rank_place p[8];
    place(t, 8, 7, PLAIT_BIND_AUTO, 1, NULL, NULL, p);
    const char *m = map(t, p, 8, 1, 2, 4, 1);
    assert_non_null(strstr(m, "tp: 2 groups of 4, 2 on one host, 2 on one NUMA node, 2 in one NVLink island"));
    assert_non_null(strstr(m, "dp: 4 groups of 2, 4 on one host, 0 on one NUMA node, 4 in one NVLink island"));
    m = map(t, p, 8, 2, 1, 8, 2); /* two DGX: tp inside each, the pp pairs across */
    assert_non_null(strstr(m, "tp: 2 groups of 8, 2 on one host, 0 on one NUMA node, 2 in one NVLink island"));
    assert_non_null(strstr(m, "pp: 8 neighbour pairs of 2 stages, 0 on one host"));
    /* the hosts as ranks joined them (mpirun --map-by node: rank r on host
     * r mod 2): the same lines the launcher prints, from the real hosts */
    int sizes[PLAIT_MESH_AXES] = {[PLAIT_AXIS_DP] = 2, [PLAIT_AXIS_TP] = 8, [PLAIT_AXIS_PP] = 1, [PLAIT_AXIS_CP] = 1};
    int axes[PLAIT_MESH_AXES], host_of[16];
    assert_int_equal(plait_mesh_parse_order("tp,dp,pp", axes), PLAIT_OK);
    for (int r = 0; r < 16; r++) host_of[r] = r % 2;
    char text[2048];
    plait_mesh_map_node_text(sizes, axes, t, p, 8, host_of, text, sizeof text);
    assert_non_null(strstr(text, "NUMA node 0: local ranks 0 1 2 3\nNUMA node 1: local ranks 4 5 6 7\n"));
    assert_non_null(strstr(text, "tp: 2 groups of 8, 0 on one host"));
    assert_non_null(strstr(text, "dp: 8 groups of 2, 8 on one host")); /* the wrong way round, and said */
    for (int r = 0; r < 16; r++) host_of[r] = r / 8;                   /* --map-by slot: as plait -n places them */
    plait_mesh_map_node_text(sizes, axes, t, p, 8, host_of, text, sizeof text);
    assert_non_null(strstr(text, "tp: 2 groups of 8, 2 on one host, 0 on one NUMA node, 2 in one NVLink island"));
    plait_topology_free(t);
    t = load("workstation-4gpu.xml"); /* no NVLink: tp crosses PCIe, and nothing claims an island */
    place(t, 4, 8, PLAIT_BIND_AUTO, 1, NULL, NULL, p);
    m = map(t, p, 4, 1, 2, 2, 1);
    assert_non_null(strstr(m, "tp: 2 groups of 2, 2 on one host, 2 on one NUMA node\n"));
    plait_topology_free(t);
}

static void test_broken_file(void **state) {
    (void)state;
    char path[] = "/tmp/plait-topo-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "<topology version=\"2.0\"><object", 31), 31);
    close(fd);
    plait_topology *t = NULL;
    assert_int_equal(plait_topology_load(path, &t), PLAIT_ERR_INVALID_CONFIG);
    assert_null(t);
    assert_non_null(strstr(plait_last_error(), path));
    assert_non_null(strstr(plait_last_error(), "topology file"));
    unlink(path);
    assert_int_equal(plait_topology_load("/nonexistent/node.xml", &t), PLAIT_ERR_INVALID_CONFIG);
    assert_non_null(strstr(plait_last_error(), "/nonexistent/node.xml"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dgx_read),           cmocka_unit_test(test_dgx_gpu_ranks),
        cmocka_unit_test(test_oversubscribed),     cmocka_unit_test(test_user_mask),
        cmocka_unit_test(test_workstation),        cmocka_unit_test(test_cpu_node),
        cmocka_unit_test(test_mesh_map),           cmocka_unit_test(test_broken_file),
        cmocka_unit_test(test_mask_rechooses_gpu), cmocka_unit_test(test_comm_card),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
