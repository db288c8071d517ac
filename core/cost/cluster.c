/* CLUSTER.ini through the config machinery (FILE:LINE errors, allowed values). */
#include "cost/cluster.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "device/device.h"
#include "kernels/kernels.h"
#include "runtime/error.h"
#include "runtime/regular_file.h"

#define KEY(k, type, def, lo, hi, choices, doc) \
    {sizeof(plait_key_decl), 0, (k), (type), (def), (lo), (hi), (choices), (doc)}

static const char *const node_kinds[] = {"cpu", "gpu", NULL};
static const char *const precisions[] = {"auto", "fp32", "tf32", "bf16", NULL};
static const char *const intra_kinds[] = {"shm", "nvlink", "pcie", NULL};
static const char *const inter_kinds[] = {"none", "infiniband", "roce", "ethernet", NULL};

static const plait_key_decl cluster_keys[] = {
    KEY("name", PLAIT_KEY_STRING, "", 1, 0, NULL, "what the file describes, shown by plait plan"),
    KEY("nodes", PLAIT_KEY_INT, "1", 1, 1e6, NULL, "nodes (hosts)"),
    KEY("disk_gbps", PLAIT_KEY_FLOAT, "2", 0.001, 1e6, NULL,
        "GB/s the checkpoint directory takes, all ranks writing together (a node's NVMe; a parallel file "
        "system's aggregate): a checkpoint's predicted save time"),
    KEY("disk_writer_gbps", PLAIT_KEY_FLOAT, "0", 0, 1e6, NULL,
        "GB/s one rank's process writes to it (0 = disk_gbps): what a gathered save, rank 0 alone, reaches"),
};
static const plait_key_decl node_keys[] = {
    KEY("kind", PLAIT_KEY_ENUM, "cpu", 1, 0, node_kinds, "cpu (ranks share the cores) or gpu (a rank per GPU)"),
    KEY("gpus", PLAIT_KEY_INT, "0", 0, 1024, NULL, "GPUs per node (kind = gpu)"),
    KEY("cores", PLAIT_KEY_INT, "0", 0, 65536, NULL, "CPU cores per node (kind = cpu; 0 = this machine's)"),
    KEY("memory", PLAIT_KEY_BYTES, "0", 0, 1e18, NULL,
        "memory per GPU, or per node for kind = cpu (0 = this machine's MemTotal)"),
    KEY("peak_gflops", PLAIT_KEY_FLOAT, "0", 0, 1e12, NULL,
        "dense fp32 GFLOP/s per GPU, or per node for kind = cpu (0 = measure this machine's SGEMM)"),
    KEY("efficiency", PLAIT_KEY_FLOAT, "0.8", 0.01, 1, NULL,
        "share of peak_gflops a training step's compute reaches (GEMMs at the model's shapes, elementwise work; "
        "on kind = cpu the weights' streaming per micro-batch is counted apart, at memory_bandwidth)"),
    KEY("precision", PLAIT_KEY_ENUM, "auto", 1, 0, precisions,
        "what the cluster trains in unless the run's config sets [run] precision: auto = bf16 for kind = gpu, "
        "fp32 for kind = cpu"),
    KEY("tf32_peak_gflops", PLAIT_KEY_FLOAT, "0", 0, 1e12, NULL,
        "dense TF32 tensor-core GFLOP/s per GPU (0 = not given: the cluster cannot be planned in tf32)"),
    KEY("tf32_efficiency", PLAIT_KEY_FLOAT, "0", 0, 1, NULL,
        "share of tf32_peak_gflops a training step reaches (0 = efficiency's)"),
    KEY("bf16_peak_gflops", PLAIT_KEY_FLOAT, "0", 0, 1e12, NULL,
        "dense bf16 tensor-core GFLOP/s per GPU, or per CPU node (0 = not given: a GPU cluster cannot be "
        "planned in bf16; a CPU node computes at its fp32 rate)"),
    KEY("bf16_efficiency", PLAIT_KEY_FLOAT, "0", 0, 1, NULL,
        "share of bf16_peak_gflops a training step reaches (0 = efficiency's)"),
    KEY("memory_bandwidth", PLAIT_KEY_FLOAT, "20", 0.001, 1e6, NULL,
        "GB/s per GPU, or per node for kind = cpu (the optimizer step is bound by it)"),
    KEY("host_bandwidth", PLAIT_KEY_FLOAT, "25", 0.001, 1e6, NULL,
        "kind = gpu: GB/s one GPU copies to or from host memory, each way (PCIe 4.0 x16 about 25, 5.0 about 50): "
        "[model] recompute_offload's copies (a CPU node's memory is host memory: nothing to copy)"),
    KEY("process_mb", PLAIT_KEY_FLOAT, "0", 0, 1e9, NULL,
        "MiB every rank holds besides the model: code, libraries, the data, the runtime (0 = this machine's: 9, "
        "and 10 more on a CPU node where this machine's products run on oneDNN)"),
    KEY("topology", PLAIT_KEY_STRING, "", 1, 0, NULL,
        "kind = gpu: an hwloc XML of one node (lstopo node.xml; configs/topologies/), relative to this file's "
        "folder: groups inside one of its NVLink islands use [intra], other groups of one node [cross]"),
    KEY("half_rate_rows", PLAIT_KEY_FLOAT, "0", 0, 1e9, NULL,
        "kind = cpu: rows of a micro-batch (its tokens) at which a rank computes at half its large-batch rate "
        "(0 = measure this machine's when peak_gflops is 0 too, else the rate does not depend on them)"),
    KEY("attention_efficiency", PLAIT_KEY_FLOAT, "0", 0, 1, NULL,
        "kind = gpu: share of peak_gflops the device's fused attention reaches in fp32, forward and backward by "
        "the planner's count (0 = as the products: efficiency and half_rate_width)"),
    KEY("tf32_attention_efficiency", PLAIT_KEY_FLOAT, "0", 0, 1, NULL,
        "kind = gpu: share of tf32_peak_gflops the device's fused attention reaches (0 = as the products)"),
    KEY("bf16_attention_efficiency", PLAIT_KEY_FLOAT, "0", 0, 1, NULL,
        "kind = gpu: share of bf16_peak_gflops the device's fused attention reaches (0 = as the products)"),
    KEY("half_rate_width", PLAIT_KEY_FLOAT, "0", 0, 1e9, NULL,
        "kind = gpu: the width of a rank's products (the model's width over tp) at which a GPU computes at half "
        "the rate its efficiency gives for wide ones (0 = the rate does not depend on it)"),
};
/* Both link sections have the same keys; only the kinds and defaults differ. */
#define LINK_KEYS(kinds, kind_default, kind_doc, bw_default, latency_default)                     \
    {                                                                                             \
        KEY("kind", PLAIT_KEY_ENUM, kind_default, 1, 0, kinds, kind_doc),                       \
            KEY("bandwidth", PLAIT_KEY_FLOAT, bw_default, 0.001, 1e6, NULL, "GB/s one rank moves through it"), \
            KEY("latency_us", PLAIT_KEY_FLOAT, latency_default, 0, 1e7, NULL, "microseconds per message"),    \
    }
static const plait_key_decl intra_keys[] = LINK_KEYS(intra_kinds, "shm", "link between ranks of one node", "2.2", "15");
static const plait_key_decl cross_keys[] = LINK_KEYS(
    intra_kinds, "pcie", "link between GPUs of one node outside one NVLink island ([node] topology)", "25", "10");
static const plait_key_decl inter_keys[] = {
    KEY("kind", PLAIT_KEY_ENUM, "none", 1, 0, inter_kinds, "network between nodes (none: one node)"),
    KEY("bandwidth", PLAIT_KEY_FLOAT, "1", 0.001, 1e6, NULL, "GB/s one rank moves through it (its own NIC)"),
    KEY("latency_us", PLAIT_KEY_FLOAT, "50", 0, 1e7, NULL, "microseconds per message"),
    KEY("node_bandwidth", PLAIT_KEY_FLOAT, "0", 0, 1e7, NULL,
        "GB/s a node's NICs move together, shared by its ranks when all send at once "
        "(0 = bandwidth x the node's ranks: a NIC per rank)"),
};

#define DECLARE(sec, arr) \
    plait_config_declare(cfg, sec, arr, sizeof(arr) / sizeof(arr[0]), sizeof(arr[0]), "cluster file")

static void read_link(const plait_config *cfg, const char *sec, plait_link *l) {
    snprintf(l->kind, sizeof l->kind, "%s", plait_config_str(cfg, sec, "kind"));
    l->bandwidth = plait_config_float(cfg, sec, "bandwidth") * 1e9;
    l->latency = plait_config_float(cfg, sec, "latency_us") * 1e-6;
}

static double mem_total(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    double kb = 0;
    if (f) {
        if (fscanf(f, "MemTotal: %lf kB", &kb) != 1) kb = 0;
        fclose(f);
    }
    return kb * 1024.0;
}

static int online_cores(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* Fill `out` from a finalized config holding the cluster sections. */
static plait_status read_cluster(const plait_config *cfg, const char *name, plait_cluster *out) {
    memset(out, 0, sizeof *out);
    const char *n = plait_config_str(cfg, "cluster", "name");
    snprintf(out->name, sizeof out->name, "%s", n && *n ? n : name);
    out->nodes = (int)plait_config_int(cfg, "cluster", "nodes");
    out->disk_bandwidth = plait_config_float(cfg, "cluster", "disk_gbps") * 1e9;
    out->disk_writer_bandwidth = plait_config_float(cfg, "cluster", "disk_writer_gbps") * 1e9;
    if (out->disk_writer_bandwidth <= 0 || out->disk_writer_bandwidth > out->disk_bandwidth)
        out->disk_writer_bandwidth = out->disk_bandwidth;
    out->gpu = strcmp(plait_config_str(cfg, "node", "kind"), "gpu") == 0;
    out->units_per_node = (int)plait_config_int(cfg, "node", out->gpu ? "gpus" : "cores");
    if (!out->gpu && out->units_per_node == 0) out->units_per_node = online_cores();
    plait_value v;
    out->memory = plait_config_get(cfg, "node", "memory", &v) == PLAIT_OK ? (double)v.i : 0;
    if (out->memory == 0 && !out->gpu) out->memory = mem_total();
    out->peak_flops = plait_config_float(cfg, "node", "peak_gflops") * 1e9;
    out->efficiency = plait_config_float(cfg, "node", "efficiency");
    out->half_rows = out->gpu ? 0 : plait_config_float(cfg, "node", "half_rate_rows");
    out->half_width = out->gpu ? plait_config_float(cfg, "node", "half_rate_width") : 0;
    out->memory_bandwidth = plait_config_float(cfg, "node", "memory_bandwidth") * 1e9;
    out->host_bandwidth = out->gpu ? plait_config_float(cfg, "node", "host_bandwidth") * 1e9 : 0;
    out->process_bytes = plait_config_float(cfg, "node", "process_mb") * 1048576.0;
    /* measured with gpt-tiny's peak RSS: 66 MiB on the BLAS, 76 with
     * oneDNN's code and OpenMP runtime loaded (docs/plan.md) */
    if (out->process_bytes <= 0)
        out->process_bytes = (9.0 + (!out->gpu && plait_kernels_onednn_expected() ? 10.0 : 0.0)) * 1048576.0;
    out->peak_tf32 = plait_config_float(cfg, "node", "tf32_peak_gflops") * 1e9;
    out->efficiency_tf32 = plait_config_float(cfg, "node", "tf32_efficiency");
    out->peak_bf16 = plait_config_float(cfg, "node", "bf16_peak_gflops") * 1e9;
    out->efficiency_bf16 = plait_config_float(cfg, "node", "bf16_efficiency");
    out->attention_efficiency = plait_config_float(cfg, "node", "attention_efficiency");
    out->attention_efficiency_tf32 = plait_config_float(cfg, "node", "tf32_attention_efficiency");
    out->attention_efficiency_bf16 = plait_config_float(cfg, "node", "bf16_attention_efficiency");
    if (out->efficiency_tf32 <= 0) out->efficiency_tf32 = out->efficiency;
    if (out->efficiency_bf16 <= 0) out->efficiency_bf16 = out->efficiency;
    const char *prec = plait_config_str(cfg, "node", "precision");
    out->precision = out->gpu ? PLAIT_PRECISION_BF16 : PLAIT_PRECISION_FP32;
    if (strcmp(prec, "auto") != 0) (void)plait_device_precision_parse(prec, &out->precision);
    const char *pw = NULL;
    plait_config_origin(cfg, "node", "precision", &pw);
    snprintf(out->precision_where, sizeof out->precision_where, "%s",
             pw && strcmp(pw, "default") != 0 ? pw : name);
    read_link(cfg, "intra", &out->intra);
    read_link(cfg, "inter", &out->inter);
    read_link(cfg, "cross", &out->cross);
    out->inter_node_bandwidth = plait_config_float(cfg, "inter", "node_bandwidth") * 1e9;
    /* a key of the other kind of node would be ignored in silence (GPUs
     * planned as this machine's cores, cores on a GPU node) */
    static const struct {
        const char *key;
        int gpu;
    } kind_keys[] = {{"gpus", 1},
                     {"cores", 0},
                     {"half_rate_rows", 0},
                     {"half_rate_width", 1},
                     {"attention_efficiency", 1},
                     {"tf32_attention_efficiency", 1},
                     {"bf16_attention_efficiency", 1}};
    for (size_t i = 0; i < sizeof kind_keys / sizeof kind_keys[0]; i++) {
        const char *at = NULL, *kind_at = NULL;
        if (kind_keys[i].gpu == out->gpu ||
            plait_config_origin(cfg, "node", kind_keys[i].key, &at) == PLAIT_ORIGIN_DEFAULT)
            continue;
        plait_config_origin(cfg, "node", "kind", &kind_at);
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s: [node] %s describes %s nodes, but [node] kind is %s (%s): %s", at ? at : name,
                               kind_keys[i].key, kind_keys[i].gpu ? "GPU" : "CPU", out->gpu ? "gpu" : "cpu",
                               kind_at && strcmp(kind_at, "default") != 0 ? kind_at : "the default",
                               kind_keys[i].gpu ? "add kind = gpu (with memory and peak_gflops per GPU), or leave "
                                                  "gpus out for CPU nodes"
                                                : "leave it out for GPU nodes (their rate is peak_gflops per GPU), "
                                                  "or set kind = cpu");
    }
    if (out->gpu && (out->units_per_node < 1 || out->memory <= 0 || out->peak_flops <= 0)) {
        const char *where = NULL;
        plait_config_origin(cfg, "node", "kind", &where);
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s: [node] kind = gpu needs gpus >= 1, memory > 0 and peak_gflops > 0 "
                               "(a GPU cannot be measured from here)",
                               where ? where : name);
    }
    if (out->nodes > 1 && strcmp(out->inter.kind, "none") == 0)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s: [cluster] nodes = %d needs an [inter] network: kind = infiniband, roce "
                               "or ethernet, with bandwidth and latency_us",
                               name, out->nodes);
    const char *topo = plait_config_str(cfg, "node", "topology"), *topo_at = NULL;
    plait_config_origin(cfg, "node", "topology", &topo_at);
    if (topo && *topo) return plait_cluster_read_topology(out, name, topo, topo_at ? topo_at : name);
    return PLAIT_OK;
}

/* From the file at `path`, or from `text` named `path` when text is given,
 * or the defaults when neither is. */
static plait_status build(const char *path, const char *text, plait_cluster *out) {
    plait_config *cfg = plait_config_new();
    if (!cfg) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    plait_status st = DECLARE("cluster", cluster_keys);
    if (st == PLAIT_OK) st = DECLARE("node", node_keys);
    if (st == PLAIT_OK) st = DECLARE("intra", intra_keys);
    if (st == PLAIT_OK) st = DECLARE("inter", inter_keys);
    if (st == PLAIT_OK) st = DECLARE("cross", cross_keys);
    if (st == PLAIT_OK && text) st = plait_config_load_string(cfg, path, text);
    else if (st == PLAIT_OK && path) {
        /* a FIFO, device or directory named as what it is meant to be (the
         * INI loader would call it a "config file") */
        int fd;
        uint64_t size;
        st = plait_open_regular(path, "cluster file", PLAIT_ERR_INVALID_CONFIG, &fd, &size);
        if (st == PLAIT_OK) close(fd);
        if (st == PLAIT_OK) st = plait_config_load_file(cfg, path);
    }
    /* a file that sets no key (empty, comments or section headers alone)
     * would plan this machine's defaults under the file's name: a file
     * truncated or named by mistake, never what was meant */
    const char *const *sections = NULL;
    if (st == PLAIT_OK && (path || text) && plait_config_raw_sections(cfg, &sections) == 0)
        st = plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                             "%s: the cluster file sets no key of [cluster], [node], [intra] or [inter] (the "
                             "files of configs/clusters/ show each key; leave --cluster out to plan this machine)",
                             path ? path : "cluster file");
    /* no environment: a cluster file says everything itself */
    char *const no_env[] = {NULL};
    if (st == PLAIT_OK) st = plait_config_finalize(cfg, no_env);
    if (st == PLAIT_OK) st = read_cluster(cfg, path ? path : "this machine", out);
    plait_config_free(cfg);
    return st;
}

plait_status plait_cluster_load(const char *path, plait_cluster *out) { return build(path, NULL, out); }

plait_status plait_cluster_parse(const char *name, const char *text, plait_cluster *out) {
    return build(name, text, out);
}

void plait_cluster_default(plait_cluster *out) {
    if (build(NULL, NULL, out) != PLAIT_OK) memset(out, 0, sizeof *out); /* the defaults above are valid */
    snprintf(out->name, sizeof out->name, "this machine (defaults of configs/clusters/this-machine.ini)");
}

plait_status plait_cluster_rate(const plait_cluster *c, plait_precision precision, double *flops_per_s) {
    double peak = c->peak_flops, eff = c->efficiency;
    const char *key = NULL;
    if (precision == PLAIT_PRECISION_BF16 && (c->peak_bf16 > 0 || c->gpu)) {
        peak = c->peak_bf16;
        eff = c->efficiency_bf16;
        key = "bf16_peak_gflops";
    } else if (precision == PLAIT_PRECISION_TF32 && (c->peak_tf32 > 0 || c->gpu)) {
        peak = c->peak_tf32;
        eff = c->efficiency_tf32;
        key = "tf32_peak_gflops";
    }
    *flops_per_s = peak * eff;
    if (peak > 0) return PLAIT_OK;
    return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                           "%s: [node] %s is not given, and planning in %s on a GPU cluster needs the GPUs' dense %s "
                           "tensor-core rate (an A100's is 312000 bf16 and 156000 tf32, an H100 SXM's 989000 and "
                           "494000); or plan in fp32 with run.precision=fp32",
                           c->precision_where, key ? key : "peak_gflops", plait_device_precision_name(precision),
                           plait_device_precision_name(precision));
}

double plait_cluster_attention_rate(const plait_cluster *c, plait_precision precision) {
    if (!c->gpu) return 0;
    if (precision == PLAIT_PRECISION_BF16) return c->peak_bf16 * c->attention_efficiency_bf16;
    if (precision == PLAIT_PRECISION_TF32) return c->peak_tf32 * c->attention_efficiency_tf32;
    return c->peak_flops * c->attention_efficiency;
}

double plait_cluster_inter_share(const plait_cluster *c, int concurrent) {
    double nic = c->inter.bandwidth;
    if (concurrent < 1 || c->inter_node_bandwidth <= 0) return nic;
    double share = c->inter_node_bandwidth / concurrent;
    return share < nic ? share : nic;
}

plait_status plait_cluster_check_ranks(const plait_cluster *c, int ranks) {
    if (c->gpu && (long)ranks > (long)c->nodes * c->units_per_node)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s: %d ranks need %d GPUs; the cluster has %d node%s x %d GPUs = %d", c->name, ranks,
                               ranks, c->nodes, c->nodes == 1 ? "" : "s", c->units_per_node,
                               c->nodes * c->units_per_node);
    return PLAIT_OK;
}

int plait_cluster_ranks_per_node(const plait_cluster *c, int ranks) {
    if (c->gpu) return c->units_per_node;
    int n = c->nodes > 0 ? c->nodes : 1;
    return (ranks + n - 1) / n;
}

int plait_cluster_rank_threads(const plait_cluster *c, int ranks, int given) {
    if (c->gpu) return 1;
    int units = c->units_per_node > 0 ? c->units_per_node : 1, per_node = plait_cluster_ranks_per_node(c, ranks);
    int t = given > 0 ? given : units / (per_node > 0 ? per_node : 1);
    return t < 1 ? 1 : t > units ? units : t;
}

const plait_link *plait_cluster_link(const plait_cluster *c, int ranks, int size, int stride) {
    int per_node = plait_cluster_ranks_per_node(c, ranks);
    if (c->nodes > 1 && (long)size * stride > per_node) return &c->inter;
    return plait_cluster_group_crosses(c, size, stride) ? &c->cross : &c->intra;
}

/* Column `name` of a CSV header line, or -1. */
static int csv_column(char *header, const char *name) {
    int k = 0;
    for (char *p = strtok(header, ",\n"); p; p = strtok(NULL, ",\n"), k++)
        if (strcmp(p, name) == 0) return k;
    return -1;
}

/* A CSV cell as a finite number, NaN when it is not one (text, inf, 1e999). */
static double csv_number(const char *s) {
    char *end = NULL;
    double v = strtod(s, &end);
    return end != s && !*end && isfinite(v) ? v : NAN;
}

plait_status plait_cluster_fit_comm(plait_cluster *c, const char *csv_path) {
    FILE *f = NULL;
    plait_status opened = plait_fopen_regular(csv_path, "--comm-csv file", PLAIT_ERR_INVALID_CONFIG, &f);
    if (opened != PLAIT_OK) return opened;
    char line[2048], head[2048];
    int col_op = -1, col_n = -1, col_s = -1, col_t = -1, lineno = 1;
    if (fgets(line, sizeof line, f)) {
        snprintf(head, sizeof head, "%s", line);
        col_op = csv_column(head, "op");
        snprintf(head, sizeof head, "%s", line);
        col_n = csv_column(head, "ranks");
        snprintf(head, sizeof head, "%s", line);
        col_s = csv_column(head, "size_bytes");
        snprintf(head, sizeof head, "%s", line);
        col_t = csv_column(head, "time_us");
    }
    if (col_op < 0 || col_n < 0 || col_s < 0 || col_t < 0) {
        fclose(f);
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s:1: not a 'plait bench comm --csv' table (needs the columns op, ranks, "
                               "size_bytes, time_us)",
                               csv_path);
    }
    /* t = a + b.x with x = 2(n-1)/n . S: a = 2(n-1) alpha, b = 1 / beta */
    double sx = 0, sy = 0, sxx = 0, sxy = 0, steps = 0;
    int rows = 0;
    char *row = NULL; /* a line of any length is one row */
    size_t row_cap = 0;
    while (getline(&row, &row_cap, f) > 0) {
        lineno++;
        char *field[32];
        int k = 0;
        for (char *p = strtok(row, ",\r\n"); p && k < 32; p = strtok(NULL, ",\r\n")) field[k++] = p;
        int need = col_op > col_n ? col_op : col_n;
        need = need > col_s ? need : col_s;
        need = need > col_t ? need : col_t;
        if (k <= need || strcmp(field[col_op], "allreduce") != 0) continue;
        double n = csv_number(field[col_n]), S = csv_number(field[col_s]), t = csv_number(field[col_t]) * 1e-6;
        if (!(n >= 2 && n <= 1e9 && S > 0 && S <= 1e18 && t > 0 && t <= 1e6)) {
            fclose(f);
            free(row);
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "%s:%d: an allreduce row needs numbers: ranks in "
                                                             "2..1e9, size_bytes in 1..1e18 and time_us in "
                                                             "0..1e12",
                                   csv_path, lineno);
        }
        double x = 2 * (n - 1) / n * S;
        sx += x;
        sy += t;
        sxx += x * x;
        sxy += x * t;
        steps += 2 * (n - 1);
        rows++;
    }
    free(row);
    fclose(f);
    double den = rows * sxx - sx * sx;
    if (rows < 2 || den <= 0)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s: needs allreduce rows of at least two sizes to fit latency and bandwidth", csv_path);
    double b = (rows * sxy - sx * sy) / den, a = (sy - b * sx) / rows;
    if (b <= 0)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s: the times do not grow with the size; measure larger sizes (--max 64M)", csv_path);
    c->intra.bandwidth = 1 / b;
    c->intra.latency = a > 0 ? a / (steps / rows) : 0;
    return PLAIT_OK;
}
