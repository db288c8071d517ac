/* Evaluating a layout through the plan its parallel plugin makes: each
 * rank's cost, the job's memory and step time, the plans a search keeps
 * by the settings they read, and the ranking of the results. */
#include "cost/layouts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <plait/optim.h>

#include "coll/compress.h"
#include "device/device.h"
#include "kernels/kernels.h"
#include "layout/mesh.h"
#include "cost/rank_cost.h"
#include "plugin/loader.h"
#include "runtime/error.h"
#include "train/masters.h"
#include "train/preflight.h"

typedef struct collect {
    plait_cost_rank *ranks;
    int n, cap;
    plait_precision precision;
    const plait_cost_device *device;
    int sp;                  /* the layout's sequence parallelism */
    int cp;                  /* its context parallelism */
    const plait_config *cfg; /* the layout's: its experts, read at the first rank */
    plait_cost_moe moe;
    int moe_read;
} collect;

static void visit(void *ctx, const plait_layout_rank *r) {
    collect *c = ctx;
    if (!c->moe_read && c->cfg) plait_cost_moe_of(c->cfg, r->spec->ffn_hidden, &c->moe), c->moe_read = 1;
    const int res16 = c->cfg && plait_cost_config_residual_bf16(c->cfg);
    const int offload = c->cfg && plait_cost_config_recompute_offload(c->cfg);
    if (c->n < c->cap)
        plait_cost_rank_from_plan(r, c->precision, c->device, c->sp, c->cp, res16, offload, &c->moe, &c->ranks[c->n++]);
}

void plait_cost_model_dims(const plait_config *cfg, int64_t *T, int64_t *HS) {
    int64_t C = plait_config_int(cfg, "model", "n_embd"), NH = plait_config_int(cfg, "model", "n_head");
    *T = plait_config_int(cfg, "model", "block_size");
    *HS = strcmp(plait_config_str(cfg, "model", "arch"), "gpt") == 0 && NH > 0 ? C / NH : C;
}

void plait_cost_device_planned(const plait_config *cfg, int gpu, plait_cost_device *out) {
    int64_t T, HS;
    plait_cost_model_dims(cfg, &T, &HS);
    if (gpu) plait_cost_device_cuda(T, HS, out);
    else plait_cost_device_of(plait_kernels_table(), T, HS, out);
}

double plait_cost_mem_limit(const plait_cluster *c, int ranks) {
    return c->gpu ? c->memory : c->memory / plait_cluster_ranks_per_node(c, ranks);
}

double plait_cost_bucket_bytes(const plait_config *cfg, const char *optim, int bucket_mb) {
    if (bucket_mb > 0) return bucket_mb * 1e6;
    plait_value v;
    char sec[48];
    snprintf(sec, sizeof sec, plait_cost_zero_stage(optim) ? "optim.%s" : "parallel.dp", optim);
    /* the plugins' defaults: [parallel.dp] "25M"; [optim.zeroN] 0, which
     * plait_cost_zero_unit_bytes resolves */
    const double dflt = plait_cost_zero_stage(optim) ? 0 : 25.0 * 1024 * 1024;
    return plait_config_get(cfg, sec, "bucket_size", &v) == PLAIT_OK ? (double)v.i : dflt;
}

/* The optimizer's ZeRO stage and the bucket its gradients move in
 * (plait_cost_bucket_bytes). */
static void optim_of(const plait_config *cfg, int bucket_mb, int *zero, double *bucket) {
    const char *optim = plait_config_str(cfg, "optim", "plugin");
    *zero = plait_cost_zero_stage(optim);
    *bucket = plait_cost_bucket_bytes(cfg, optim, bucket_mb);
}

/* (coll/compress.h's sizes) */
void plait_cost_wire(const plait_config *cfg, int zero, double *grad, double *param) {
    char sec[48];
    snprintf(sec, sizeof sec, zero ? "optim.zero%d" : "parallel.dp", zero);
    plait_value v;
    int g = plait_config_get(cfg, sec, "grad_compression", &v) == PLAIT_OK ? (int)v.i : 0;
    int p = zero && plait_config_get(cfg, sec, "param_gather", &v) == PLAIT_OK && v.i ? PLAIT_COMPRESS_BF16 : 0;
    const size_t n = 1u << 20;
    *grad = (double)plait_compress_bytes((plait_compression)g, n) / (4.0 * n);
    *param = (double)plait_compress_bytes((plait_compression)p, n) / (4.0 * n);
}

void plait_cost_offload_of(const plait_config *cfg, int *offload, double *buffer, int *params) {
    plait_value v;
    *offload = plait_config_get(cfg, "optim", "offload", &v) == PLAIT_OK ? (int)v.i : 0;
    *buffer = plait_config_get(cfg, "optim", "offload_buffer", &v) == PLAIT_OK ? (double)v.i : 0;
    *params = plait_config_get(cfg, "optim", "offload_params", &v) == PLAIT_OK && v.i;
}

/* Bit z set where [optim.zeroZ] `key` reads `value` (z = 1, 2). */
static int zero12_bits(const plait_config *cfg, const char *key, int64_t value) {
    int bits = 0;
    for (int z = 1; z <= 2; z++) {
        char sec[16];
        snprintf(sec, sizeof sec, "optim.zero%d", z);
        plait_value v;
        if (plait_config_get(cfg, sec, key, &v) == PLAIT_OK && v.i == value) bits |= 1 << z;
    }
    return bits;
}

static int overlap_gather_of(const plait_config *cfg) { return zero12_bits(cfg, "overlap_param_gather", 1); }

static int moments16_of(const plait_config *cfg) {
    plait_value v;
    return plait_config_get(cfg, "optim", "moments", &v) == PLAIT_OK && v.i == 1;
}

static int grad_accum16_of(const plait_config *cfg) {
    plait_value v;
    return plait_config_get(cfg, "optim.zero1", "grad_accum", &v) == PLAIT_OK && v.i == 1;
}

static int dp_serial_of(const plait_config *cfg) {
    plait_value v;
    return plait_config_get(cfg, "parallel.dp", "overlap", &v) == PLAIT_OK && v.i == 0; /* default true */
}

static int deterministic_of(const plait_config *cfg) {
    plait_value v;
    return plait_config_get(cfg, "run", "deterministic", &v) == PLAIT_OK && v.i;
}

static int tp_overlap_of(const plait_config *cfg) {
    plait_value v;
    return plait_config_get(cfg, "parallel.tp", "overlap", &v) != PLAIT_OK || v.i != 0; /* the plugin's default */
}

/* master's choices are auto, sharded, whole (plugins/optim/common/zero_state.c) */
static int masters_of(const plait_config *cfg) { return zero12_bits(cfg, "master", 2); }

/* [optim.zeroZ] max_inflight (z = 1, 2, 3) and [optim.zero3]
 * prefetch_layers + 1, where the config has them (0 elsewhere: the
 * defaults) */
static void zero_buffers_of(const plait_config *cfg, int inflight[4], int *gathered) {
    plait_value v;
    for (int z = 1; z <= 3; z++) {
        char sec[16];
        snprintf(sec, sizeof sec, "optim.zero%d", z);
        inflight[z] = plait_config_get(cfg, sec, "max_inflight", &v) == PLAIT_OK ? (int)v.i : 0;
    }
    *gathered = plait_config_get(cfg, "optim.zero3", "prefetch_layers", &v) == PLAIT_OK ? (int)v.i + 1 : 0;
}

void plait_cost_ctx_from_config(const plait_config *cfg, plait_cost_ctx *x) {
    x->cfg = cfg;
    for (int z = 0; z < 4; z++) {
        char name[8];
        snprintf(name, sizeof name, z ? "zero%d" : "adam", z);
        x->optim_ops[z] = plait_optim_ops_of(name);
    }
    plait_cost_offload_of(cfg, &x->offload, &x->offload_buffer, &x->offload_params);
    x->whole_masters = masters_of(cfg);
    x->overlap_gather = overlap_gather_of(cfg);
    x->grad_accum16 = grad_accum16_of(cfg);
    x->moments16 = moments16_of(cfg);
    x->tp_overlap = tp_overlap_of(cfg);
    zero_buffers_of(cfg, x->zero_inflight, &x->zero3_gathered);
    x->dp_serial = dp_serial_of(cfg);
    plait_value v;
    x->dp_compression = plait_config_get(cfg, "parallel.dp", "grad_compression", &v) == PLAIT_OK && v.i != 0;
    x->deterministic = deterministic_of(cfg);
    x->threads = (int)plait_config_int(cfg, "run", "threads");
    /* the order the config was checked with: a bad one leaves the default */
    const char *order = plait_config_str(cfg, "parallel", "order");
    if (!order || plait_mesh_parse_order(order, x->axes) != PLAIT_OK) {
        memset(x->axes, 0, sizeof x->axes);
        plait_clear_error();
    }
}

/* The fields of a job that its context holds. */
static void job_keys(const plait_cost_ctx *x, plait_cost_job *j) {
    j->precision = x->precision;
    j->hierarchical = x->hierarchical;
    j->offload = x->offload;
    j->offload_buffer = x->offload_buffer;
    j->offload_params = x->offload_params;
    j->whole_masters = x->whole_masters;
    j->overlap_gather = x->overlap_gather;
    j->grad_accum16 = x->grad_accum16;
    j->moments16 = x->moments16;
    j->tp_overlap = x->tp_overlap;
    memcpy(j->zero_inflight, x->zero_inflight, sizeof j->zero_inflight);
    j->zero3_gathered = x->zero3_gathered;
    j->dp_serial = x->dp_serial;
    j->deterministic = x->deterministic;
    memcpy(j->axes, x->axes, sizeof j->axes);
    j->threads = x->threads;
}

plait_status plait_cost_check_masters(const plait_config *cfg, int bf16) {
    const plait_plugin_desc *d = plait_plugin_load(PLAIT_KIND_OPTIM, plait_config_str(cfg, "optim", "plugin"));
    if (!d) { /* train names the plugin it cannot load */
        plait_clear_error();
        return PLAIT_OK;
    }
    int sharded;
    return plait_check_masters(cfg, ((const plait_optim_ops *)d->ops)->flags, bf16, &sharded);
}

static int world_of(const plait_config *cfg) {
    return (int)(plait_config_int(cfg, "parallel", "dp") * plait_config_int(cfg, "parallel", "tp") *
                 plait_config_int(cfg, "parallel", "pp"));
}

/* The cost of every rank (all = 1), or of one rank per pipeline stage,
 * through the preflight (col->ranks allocated here; col's precision and
 * device set by the caller). */
static plait_status rank_costs(plait_config *cfg, int all, collect *col) {
    int want = all ? world_of(cfg) : (int)plait_config_int(cfg, "parallel", "pp");
    col->n = 0;
    col->cap = want;
    col->ranks = calloc((size_t)want, sizeof(plait_cost_rank));
    if (!col->ranks) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    plait_status st = all ? plait_layout_preflight_visit(cfg, visit, col)
                          : plait_layout_preflight_stages(cfg, visit, col);
    if (st == PLAIT_OK && col->n != want)
        st = plait_set_error(PLAIT_ERR_INTERNAL, "the preflight planned %d of %d ranks", col->n, want);
    return st;
}

/* The index among the ranks the preflight plans (world order, a cp
 * group's rank 0 alone) of world rank w's cp rank 0 peer, whose plan and
 * memory it shares. */
static int planned_index(int w, const int sizes[PLAIT_MESH_AXES], const int axes[PLAIT_MESH_AXES]) {
    int c[PLAIT_MESH_AXES];
    plait_mesh_coords(w, sizes, axes, c);
    c[PLAIT_AXIS_CP] = 0;
    int peer = plait_mesh_rank_of(c, sizes, axes), index = 0;
    for (int r = 0; r < peer; r++) {
        plait_mesh_coords(r, sizes, axes, c);
        index += c[PLAIT_AXIS_CP] == 0;
    }
    return index;
}

plait_status plait_cost_config_memory(plait_config *cfg, const plait_cluster *c, const plait_cost_device *dev,
                                      plait_cost_mem *per_rank, int cap, int *n) {
    plait_precision precision = plait_device_precision(cfg);
    collect col = {.precision = precision,
                   .device = dev,
                   .sp = plait_cost_config_sp(cfg),
                   .cp = (int)plait_config_int(cfg, "parallel", "cp"),
                   .cfg = cfg};
    plait_status st = rank_costs(cfg, 1, &col);
    int zero;
    double bucket, gw, pw;
    optim_of(cfg, 0, &zero, &bucket);
    plait_cost_wire(cfg, zero, &gw, &pw);
    *n = 0;
    plait_cost_job j = {.dp = (int)plait_config_int(cfg, "parallel", "dp"),
                        .tp = (int)plait_config_int(cfg, "parallel", "tp"),
                        .pp = (int)plait_config_int(cfg, "parallel", "pp"),
                        .cp = col.cp,
                        .zero = zero,
                        .bucket_bytes = bucket};
    plait_cost_ctx keys = {.precision = precision};
    plait_cost_ctx_from_config(cfg, &keys);
    job_keys(&keys, &j);
    /* every world rank: a cp rank's memory is its cp rank 0 peer's */
    int sizes[PLAIT_MESH_AXES], axes[PLAIT_MESH_AXES];
    if (st == PLAIT_OK) st = plait_mesh_shape(cfg, sizes, axes);
    int world = col.n * (col.cp > 1 ? col.cp : 1);
    for (int w = 0; st == PLAIT_OK && w < world && w < cap; w++) {
        int i = col.cp > 1 ? planned_index(w, sizes, axes) : w;
        col.ranks[i].grad_wire = gw;
        col.ranks[i].param_wire = pw;
        plait_cost_memory(&col.ranks[i], &j, c->process_bytes, &per_rank[w]);
        *n = w + 1;
    }
    free(col.ranks);
    return st;
}

void plait_cost_job_of(const plait_cost_layout *l, const plait_cost_ctx *x, double bucket_bytes, plait_cost_job *out) {
    *out = (plait_cost_job){.dp = l->dp,
                            .tp = l->tp,
                            .pp = l->pp,
                            .cp = plait_cost_layout_cp(l),
                            .ep = l->ep > 1 ? l->ep : 1,
                            .zero = plait_cost_zero_stage(l->optim),
                            .bucket_bytes = bucket_bytes,
                            .wire_bytes = plait_cost_tp_wire_bytes(x->precision, l->comm, &x->device),
                            .cp_kv_bytes = x->precision == PLAIT_PRECISION_BF16 && strcmp(l->comm, "nccl") != 0 ? 2
                                                                                                                : 4};
    job_keys(x, out);
}

double plait_cost_tp_wire_bytes(plait_precision precision, const char *comm, const plait_cost_device *dev) {
    if (precision != PLAIT_PRECISION_BF16) return 4;
    /* the core's algorithms (tcp, verbs) send bf16 in their wire format;
     * nccl, which moves device memory itself, takes bf16 tensors where the
     * device widens them back (tp_wire16.c, step_pipeline.c) */
    return strcmp(comm, "nccl") != 0 || dev->bf16_tensors ? 2 : 4;
}

void plait_cost_finish(const plait_cost_rank *stages, const plait_cost_layout *l, const plait_cost_ctx *x,
                       double bucket_bytes, int block_size, plait_cost_result *out) {
    plait_cost_finish_memory(stages, l, x, bucket_bytes, block_size, out);
    plait_cost_finish_time(stages, l, x, bucket_bytes, out);
}

void plait_cost_finish_time(const plait_cost_rank *stages, const plait_cost_layout *l, const plait_cost_ctx *x,
                            double bucket_bytes, plait_cost_result *out) {
    plait_cost_job j;
    plait_cost_job_of(l, x, bucket_bytes, &j);
    plait_cost_step_time(stages, &j, x->cluster, &out->time);
    out->tokens_per_s = out->time.step > 0 ? out->tokens_per_step / out->time.step : 0;
}

void plait_cost_finish_memory(const plait_cost_rank *stages, const plait_cost_layout *l, const plait_cost_ctx *x,
                              double bucket_bytes, int block_size, plait_cost_result *out) {
    plait_cost_job j;
    plait_cost_job_of(l, x, bucket_bytes, &j);
    out->valid = 1;
    out->mem.total = 0;
    out->flops_per_step = 0;
    for (int s = 0; s < l->pp; s++) {
        plait_cost_mem m;
        plait_cost_memory(&stages[s], &j, x->cluster->process_bytes, &m);
        if (m.total > out->mem.total) {
            out->mem = m;
            out->mem_stage = s;
        }
        out->flops_per_step += stages[s].flops * l->dp * plait_cost_layout_cp(l) * l->tp;
    }
    out->tokens_per_step = (double)x->global_batch * block_size;
    double limit = x->mem_limit > 0 ? x->mem_limit : plait_cost_mem_limit(x->cluster, plait_cost_layout_ranks(l));
    out->fits = !(limit > 0 && out->mem.total > limit);
    out->why[0] = 0;
    if (!out->fits)
        snprintf(out->why, sizeof out->why, "memory over the limit: %.1f MiB per rank predicted, %.1f MiB allowed",
                 out->mem.total / 1048576.0, limit / 1048576.0);
    /* offload = nvme: the node's ranks share offload_path's disk */
    int per_node = plait_cluster_ranks_per_node(x->cluster, plait_cost_layout_ranks(l));
    double disk = out->mem.disk * (per_node > 0 ? per_node : 1);
    if (out->fits && x->offload_disk_free > 0 && disk > x->offload_disk_free) {
        out->fits = 0;
        snprintf(out->why, sizeof out->why,
                 "disk over the limit: %.1f MiB of offloaded optimizer state per node, %.1f MiB free in offload_path",
                 disk / 1048576.0, x->offload_disk_free / 1048576.0);
    }
    /* what the layout's optimizer refuses of the config on this layout and
     * the cluster's nodes, in its own words (its ops.check; moments = bf16
     * with offload, a rule between the core's keys, refused the config
     * before any layout) */
    if (x->cfg && plait_check_optimizer(x->cfg, x->optim_ops[j.zero & 3], l->optim, l->dp * plait_cost_layout_cp(l),
                                        (int64_t)stages[0].micro_batches, !x->cluster->gpu) != PLAIT_OK) {
        out->fits = 0;
        snprintf(out->why, sizeof out->why, "%s", plait_last_error());
        plait_clear_error();
    }
    /* the dp plugin refuses it at create, told the optimizer reduces the
     * gradients (plugins/parallel/dp): said here for the layouts weighed
     * from the model's shape, which no plugin plans */
    if (x->dp_compression && j.zero > 0 && l->dp * plait_cost_layout_cp(l) > 1) {
        out->fits = 0;
        snprintf(out->why, sizeof out->why,
                 "[parallel.dp] grad_compression with %s, which reduces the gradients itself ([optim.%s] "
                 "grad_compression)",
                 l->optim, l->optim);
    }
}

/* A plan the preflight made, by the layout's settings it reads: every
 * one but the optimizer and its bucket (they change only the job's memory
 * and time, plait_cost_finish), save whether the optimizer reduces the
 * gradients itself, which the parallel plugin is told (plan_key). */
typedef struct plan_entry {
    plait_cost_layout key;
    int valid;
    char why[512];
    plait_cost_rank *ranks;
    int n;
} plan_entry;

struct plait_cost_plans {
    plan_entry *e;
    size_t n, cap;
};

plait_cost_plans *plait_cost_plans_new(void) { return calloc(1, sizeof(plait_cost_plans)); }

void plait_cost_plans_free(plait_cost_plans *p) {
    if (!p) return;
    for (size_t i = 0; i < p->n; i++) free(p->e[i].ranks);
    free(p->e);
    free(p);
}

/* The plan depends on the optimizer only through whether it reduces the
 * gradients itself, which the parallel plugin is told at create
 * (`optim` holds "reduces" then, "" otherwise). */
static void plan_key(const plait_cost_layout *l, const plait_cost_ctx *x, plait_cost_layout *key) {
    memset(key, 0, sizeof *key);
    const plait_optim_ops *ops = x->optim_ops[plait_cost_zero_stage(l->optim) & 3];
    if (ops && (ops->flags & PLAIT_OPTIM_REDUCES_GRADS)) snprintf(key->optim, sizeof key->optim, "reduces");
    key->dp = l->dp, key->tp = l->tp, key->pp = l->pp, key->chunks = l->chunks;
    key->micro_batch = l->micro_batch, key->recompute = l->recompute, key->sp = l->sp, key->cp = l->cp;
    key->ep = l->ep;
    memcpy(key->schedule, l->schedule, sizeof key->schedule);
    memcpy(key->comm, l->comm, sizeof key->comm);
}

static plan_entry *plan_find(plait_cost_plans *p, const plait_cost_layout *key) {
    for (size_t i = 0; p && i < p->n; i++)
        if (!memcmp(&p->e[i].key, key, sizeof *key)) return &p->e[i];
    return NULL;
}

/* Keeps a copy of the preflight's answer (ranks NULL: its refusal, why). */
static void plan_keep(plait_cost_plans *p, const plait_cost_layout *key, const plait_cost_rank *ranks, int n,
                      const char *why) {
    if (!p) return;
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 64;
        plan_entry *e = realloc(p->e, cap * sizeof *e);
        if (!e) return; /* not kept: the next one plans again */
        p->e = e, p->cap = cap;
    }
    plan_entry *e = &p->e[p->n];
    memset(e, 0, sizeof *e);
    e->key = *key;
    e->valid = ranks != NULL;
    snprintf(e->why, sizeof e->why, "%s", why ? why : "");
    if (ranks) {
        e->ranks = malloc((size_t)n * sizeof *ranks);
        if (!e->ranks) return;
        memcpy(e->ranks, ranks, (size_t)n * sizeof *ranks);
        e->n = n;
    }
    p->n++;
}

plait_status plait_cost_evaluate(const plait_cost_layout *l, const plait_cost_ctx *x, plait_cost_result *out) {
    return plait_cost_evaluate_with(l, x, NULL, out, NULL, 0);
}

plait_status plait_cost_evaluate_stages(const plait_cost_layout *l, const plait_cost_ctx *x, plait_cost_result *out,
                                        plait_cost_rank *stages, int cap) {
    return plait_cost_evaluate_with(l, x, NULL, out, stages, cap);
}

plait_status plait_cost_evaluate_with(const plait_cost_layout *l, const plait_cost_ctx *x, plait_cost_plans *plans,
                                      plait_cost_result *out, plait_cost_rank *stages, int cap) {
    memset(out, 0, sizeof *out);
    out->layout = *l;
    char ov[16][96];
    char *ptr[16];
    int n = plait_cost_layout_overrides(l, x->global_batch, ov);
    for (int i = 0; i < n; i++) ptr[i] = ov[i];
    plait_config *cfg = NULL;
    collect col = {.precision = x->precision, .device = &x->device, .sp = l->sp, .cp = l->cp};
    plait_cost_layout key;
    plan_key(l, x, &key);
    const plan_entry *kept = NULL;
    plait_status st = x->load(x->load_ctx, n, ptr, &cfg);
    col.cfg = cfg;
    if (st == PLAIT_OK &&
        (plait_cost_ep_refuses(l, plait_config_int(cfg, "model", "moe_experts"), out->why, sizeof out->why) ||
         plait_cost_sp_refuses(l, plait_config_int(cfg, "model", "block_size"), out->why, sizeof out->why) ||
         plait_cost_cp_refuses(l, plait_config_int(cfg, "model", "block_size"),
                               strcmp(plait_config_str(cfg, "model", "arch"), "mlp") != 0, out->why,
                               sizeof out->why))) {
        plait_config_free(cfg);
        return PLAIT_OK;
    }
    if (st == PLAIT_OK && (kept = plan_find(plans, &key)) != NULL) {
        if (!kept->valid) {
            snprintf(out->why, sizeof out->why, "%s", kept->why);
            plait_config_free(cfg);
            return PLAIT_OK;
        }
        col.ranks = malloc((size_t)kept->n * sizeof *col.ranks);
        if (!col.ranks) st = plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
        else memcpy(col.ranks, kept->ranks, (size_t)kept->n * sizeof *col.ranks), col.n = kept->n;
    } else if (st == PLAIT_OK) {
        st = rank_costs(cfg, 0, &col);
        if (st == PLAIT_OK) plan_keep(plans, &key, col.ranks, col.n, NULL);
        else if (st != PLAIT_ERR_NO_MEMORY) plan_keep(plans, &key, NULL, 0, plait_last_error());
    }
    if (st != PLAIT_OK) {
        if (st == PLAIT_ERR_NO_MEMORY) {
            plait_config_free(cfg);
            free(col.ranks);
            return st;
        }
        snprintf(out->why, sizeof out->why, "%s", plait_last_error());
        plait_clear_error();
        plait_config_free(cfg);
        free(col.ranks);
        return PLAIT_OK;
    }
    /* the optimizer's masters as each rank of this layout would refuse
     * them, in its words: not kept with the plan, which the optimizer does
     * not change */
    if (col.n > 0 && plait_cost_check_masters(cfg, col.ranks[0].bf16) != PLAIT_OK) {
        snprintf(out->why, sizeof out->why, "%s", plait_last_error());
        plait_clear_error();
        plait_config_free(cfg);
        free(col.ranks);
        return PLAIT_OK;
    }
    int zero;
    double bucket;
    optim_of(cfg, l->bucket_mb, &zero, &bucket);
    double gw, pw;
    plait_cost_wire(cfg, zero, &gw, &pw);
    for (int i = 0; i < col.n; i++) col.ranks[i].grad_wire = gw, col.ranks[i].param_wire = pw;
    plait_cost_finish(col.ranks, l, x, bucket, (int)plait_config_int(cfg, "model", "block_size"), out);
    out->confirmed = 1;
    for (int i = 0; stages && i < col.n && i < cap; i++) stages[i] = col.ranks[i];
    plait_config_free(cfg);
    free(col.ranks);
    return PLAIT_OK;
}

static int by_speed(const void *a, const void *b) {
    const plait_cost_result *x = a, *y = b;
    int kx = x->valid && x->fits, ky = y->valid && y->fits;
    if (kx != ky) return ky - kx;
    if (x->tokens_per_s != y->tokens_per_s) return x->tokens_per_s < y->tokens_per_s ? 1 : -1;
    return memcmp(&x->layout, &y->layout, sizeof x->layout); /* the same order every run */
}

void plait_cost_sort_results(plait_cost_result *r, size_t n) { qsort(r, n, sizeof *r, by_speed); }
