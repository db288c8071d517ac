/*
 * Tensor parallelism, Megatron-LM style: inside each transformer block the
 * attention's fused q,k,v projection and the MLP's first linear are split by
 * output features (column-parallel; whole heads per rank), the two output
 * projections by input features (row-parallel), so each block needs one
 * all-reduce per column/row pair in forward (g) and one in backward (f). The
 * token embedding and the tied output head are split by vocabulary rows,
 * padded to a multiple of tp; the cross-entropy runs on the local logits with
 * three small all-reduces (max, sum of exponentials, target logit) instead of
 * gathering them. LayerNorms, position embeddings and row-parallel biases are
 * replicated.
 *
 * This plugin owns the plan (which slice each rank holds, the padded vocab)
 * and the communication (the conjugate operators the model calls); the
 * model computes with whatever slices the plan gives.
 *
 * [parallel.tp] sequence_parallel (Megatron-LM's sequence parallelism): the
 * residual stream, the norms and the embedding's output split by rows over
 * the group; the model calls `allgather` before each column-parallel product
 * and `reduce_scatter` after each row-parallel one in place of the
 * all-reduces (the conjugates in backward). Refused without tp or where tp
 * does not divide [model] block_size.
 *
 * Accounting: per micro-batch and block, 2 all-reduces in forward and 2 in
 * backward of b·s·h floats; plus one of b·s·h for the vocab-parallel
 * embedding (forward) and one for the head's input gradient (backward); plus
 * three of b·s for the cross-entropy. Payload bytes are counted per call
 * (`step_stats` bytes_sent = Σ elements × 4 of every all-reduce, × 2 for
 * the activations of a bf16 run), which is the quantity Megatron's formula
 * gives; what the wire carries is that times the all-reduce algorithm's
 * factor (ring: 2(tp-1)/tp), in the comm statistics.
 *
 * On a bf16 run ([run] precision = bf16) the activations and their
 * gradients (f, g, the all-gathers and reduce-scatters) travel in bf16,
 * half the bytes, as Megatron-LM's bf16 activations do: the collectives'
 * bf16 wire format (PLAIT_COMPRESS_BF16), each contribution rounded once
 * where it leaves its rank and the sums added in float32 inside the
 * collective. The cross-entropy's row statistics and the norms' parameter
 * gradients stay float32 (a sum of exponentials and a gradient, as
 * Megatron-LM keeps them). A comm plugin that moves device memory itself
 * (nccl) cannot carry the core's wire formats (encoded in host memory):
 * there the activations travel as bf16 tensors (tp_wire16.c: rounded on
 * the device, NCCL's bf16 collectives, whose partial sums are bf16 at
 * each hop, widened back), or float32 on a device without from_bf16
 * (ABI 1.23), said once at the first collective (docs/parallelism.md,
 * "What crosses ranks, and in which type").
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <plait/plait.h>
#include <plait/device_util.h>

#include "tp_wire16.h"

typedef struct tp_state {
    const plait_host *host; /* init->host: logging, errors, collectives */
    const plait_mesh *mesh;
    const plait_model_spec *model;
    plait_tp_ops ops;
    plait_parallel_stats stats;
    /* deterministic mode: every sum in the ordered algorithm's one order, so
     * a reduce-scatter's element is the bits of the all-reduce's (sequence
     * parallelism equals tp without it) and runs repeat bit for bit */
    plait_coll_algo algo;
    /* the activations' collectives in bf16 (a bf16 run; float32 from the
     * first refusal of the wire format on a device without from_bf16) */
    int bf16_wire;
    /* ... as bf16 tensors (tp_wire16.c), from the first refusal of the
     * core's wire format: the comm plugin moves device memory itself */
    int bf16_device;
    tp16 wire16;
} tp_state;

/* The time this rank has blocked in the TP communicator's calls: the
 * communicator's own count, whose readings are the trace's spans of the
 * same calls (so metrics.csv's tp_ms and a trace agree); the plugin's
 * clock where the core keeps no count. Every collective and wait below
 * reads it, never a clock of its own: a rank preempted between the
 * plugin's reading and the communicator's would count the preemption as
 * communication here and as compute in the trace. */
static double blocked_seconds(const plait_host *host, plait_comm *c) {
    if (!host->coll->stats) return host->now();
    plait_comm_stats cs = {.struct_size = sizeof cs};
    host->coll->stats(c, &cs);
    return cs.wait_seconds;
}

#define SECTION "parallel.tp"

/* The options of an activation's collective: bf16 on the wire on a bf16
 * run. */
static plait_coll_opts act_opts(const tp_state *s, const char *label) {
    plait_coll_opts opts = plait_tensor_coll_opts(s->host, s->algo, label); /* activations: tensor memory */
    if (s->bf16_wire) opts.compression = PLAIT_COMPRESS_BF16;
    return opts;
}

/* A collective refused its bf16 wire format (a comm plugin that moves
 * device memory itself): 1 when the caller runs it again, from now on as
 * bf16 tensors (s->bf16_device), or in float32 where the device cannot
 * widen bf16 (said once). */
static int bf16_refused(tp_state *s, plait_status st) {
    if (!s->bf16_wire || s->bf16_device || st != PLAIT_ERR_UNSUPPORTED) return 0;
    if (tp16_available(s->host)) {
        s->bf16_device = 1;
        s->wire16.host = s->host;
        return 1;
    }
    s->bf16_wire = 0;
    s->host->log(PLAIT_LOG_WARN, "tp",
                 "the activations' collectives travel in float32: the comm plugin moves device memory itself and "
                 "the device's kernel table has no from_bf16 (ABI 1.23) to widen bf16 tensors back (%s)",
                 s->host->last_error());
    return 1;
}

/* The activation options without the core's wire format: bf16 tensors. */
static plait_coll_opts tensor16_opts(const tp_state *s, const char *label) {
    plait_coll_opts opts = act_opts(s, label);
    opts.compression = PLAIT_COMPRESS_NONE;
    return opts;
}

/* Bytes of `count` activation values as they travel. */
static size_t act_bytes(const tp_state *s, size_t count) { return count * (s->bf16_wire ? 2 : sizeof(float)); }

/* An all-reduce in place: blocking with req NULL, else started (*req the
 * request op_wait ends, NULL when already done). */
static plait_status allreduce_req(tp_state *s, float *x, size_t count, plait_redop op, int act, const char *label,
                                  plait_request **req) {
    if (req) *req = NULL;
    if (s->mesh->tp == 1 || count == 0) return PLAIT_OK;
    const plait_host *host = s->host;
    plait_coll_opts opts = act ? act_opts(s, label) : plait_tensor_coll_opts(host, s->algo, label);
    double t0 = blocked_seconds(host, s->mesh->tp_comm);
    plait_status st = act && s->bf16_device
                          ? PLAIT_ERR_UNSUPPORTED
                          : host->coll->allreduce(s->mesh->tp_comm, x, x, count, PLAIT_F32, op, &opts, req);
    if (act && (s->bf16_device || bf16_refused(s, st))) {
        opts.compression = PLAIT_COMPRESS_NONE;
        st = s->bf16_device ? tp16_allreduce(&s->wire16, s->mesh->tp_comm, x, count, &opts, req)
                            : host->coll->allreduce(s->mesh->tp_comm, x, x, count, PLAIT_F32, op, &opts, req);
    }
    s->stats.wait_seconds += blocked_seconds(host, s->mesh->tp_comm) - t0;
    s->stats.bytes_sent += act ? act_bytes(s, count) : count * sizeof(float);
    s->stats.reductions++;
    return st;
}

static plait_status allreduce(tp_state *s, float *x, size_t count, plait_redop op, int act, const char *label) {
    return allreduce_req(s, x, count, op, act, label, NULL);
}

/* A sequence-parallel collective's accounting: the whole buffer's bytes,
 * as an all-reduce's (docs/parallelism.md). */
static plait_status sp_done(tp_state *s, double t0, size_t count, plait_status st) {
    s->stats.wait_seconds += blocked_seconds(s->host, s->mesh->tp_comm) - t0;
    s->stats.bytes_sent += act_bytes(s, count);
    s->stats.reductions++;
    return st;
}

static plait_status op_allgather(void *ctx, const float *local, float *full, size_t count, void **req) {
    tp_state *s = ctx;
    const plait_host *host = s->host;
    plait_coll_opts opts = act_opts(s, "tp sequence all-gather");
    if (req) *req = NULL;
    double t0 = blocked_seconds(host, s->mesh->tp_comm);
    plait_status st = s->bf16_device ? PLAIT_ERR_UNSUPPORTED
                                     : host->coll->allgather(s->mesh->tp_comm, local, full, count, PLAIT_F32, &opts,
                                                             (plait_request **)req);
    if (s->bf16_device || bf16_refused(s, st)) {
        opts = tensor16_opts(s, "tp sequence all-gather");
        st = s->bf16_device
                 ? tp16_sequence(&s->wire16, s->mesh->tp_comm, 1, local, full, count, s->mesh->tp, &opts,
                                 (plait_request **)req)
                 : host->coll->allgather(s->mesh->tp_comm, local, full, count, PLAIT_F32, &opts, (plait_request **)req);
    }
    return sp_done(s, t0, count * (size_t)s->mesh->tp, st);
}

static plait_status op_reduce_scatter(void *ctx, const float *full, float *local, size_t count, void **req) {
    tp_state *s = ctx;
    const plait_host *host = s->host;
    plait_coll_opts opts = act_opts(s, "tp sequence reduce-scatter");
    if (req) *req = NULL;
    double t0 = blocked_seconds(host, s->mesh->tp_comm);
    plait_status st = s->bf16_device ? PLAIT_ERR_UNSUPPORTED
                                     : host->coll->reduce_scatter(s->mesh->tp_comm, full, local, count, PLAIT_F32,
                                                                  PLAIT_SUM, &opts, (plait_request **)req);
    if (s->bf16_device || bf16_refused(s, st)) {
        opts = tensor16_opts(s, "tp sequence reduce-scatter");
        st = s->bf16_device ? tp16_sequence(&s->wire16, s->mesh->tp_comm, 0, full, local, count, s->mesh->tp, &opts,
                                            (plait_request **)req)
                            : host->coll->reduce_scatter(s->mesh->tp_comm, full, local, count, PLAIT_F32, PLAIT_SUM,
                                                         &opts, (plait_request **)req);
    }
    return sp_done(s, t0, count * (size_t)s->mesh->tp, st);
}

static plait_status op_wait(void *ctx, void *req) {
    tp_state *s = ctx;
    if (!req) return PLAIT_OK;
    double t0 = blocked_seconds(s->host, s->mesh->tp_comm);
    plait_status st = PLAIT_OK;
    /* the bf16 wire's requests exist only once it is in use */
    if (!s->bf16_device || !tp16_wait(&s->wire16, req, &st))
        st = PLAIT_COLL_HAS(s->host->coll, wait_device) ? s->host->coll->wait_device(req) : s->host->coll->wait(req);
    s->stats.wait_seconds += blocked_seconds(s->host, s->mesh->tp_comm) - t0;
    return st;
}

static plait_status op_enter_backward(void *ctx, float *g, size_t n) {
    return allreduce(ctx, g, n, PLAIT_SUM, 1, "tp f (backward)");
}
static plait_status op_enter_backward_start(void *ctx, float *g, size_t n, void **req) {
    return allreduce_req(ctx, g, n, PLAIT_SUM, 1, "tp f (backward)", (plait_request **)req);
}
static plait_status op_exit_forward(void *ctx, float *x, size_t n) {
    return allreduce(ctx, x, n, PLAIT_SUM, 1, "tp g (forward)");
}
static plait_status op_reduce_max(void *ctx, float *x, size_t n) {
    return allreduce(ctx, x, n, PLAIT_MAX, 0, "tp cross-entropy max");
}
static plait_status op_reduce_sum(void *ctx, float *x, size_t n) {
    return allreduce(ctx, x, n, PLAIT_SUM, 0, "tp cross-entropy sum");
}

/* Sequence parallelism splits each sequence's rows over the group: it needs
 * a group (tp >= 2) and a block_size that tp divides. The refusal names the
 * nearest tp that divides both block_size and n_head (`heads`), and the
 * block sizes around this one that tp divides. */
static plait_status sequence_check(const plait_host *host, int tp, int32_t seq, int32_t heads) {
    if (tp < 2)
        return host->set_error(PLAIT_ERR_INVALID_CONFIG,
                               "[%s] sequence_parallel = true needs tensor parallelism, but [parallel] tp = %d: "
                               "set [parallel] tp >= 2 (dividing [model] n_head and block_size) or "
                               "sequence_parallel = false",
                               SECTION, tp);
    if (seq % tp == 0) return PLAIT_OK;
    int near = 0;
    for (int d = 1; d < seq && !near; d++) {
        if (tp - d >= 2 && seq % (tp - d) == 0 && heads % (tp - d) == 0) near = tp - d;
        else if (seq % (tp + d) == 0 && heads % (tp + d) == 0) near = tp + d;
    }
    char tp_hint[64] = "";
    if (near) snprintf(tp_hint, sizeof tp_hint, "[parallel] tp = %d, or ", near);
    const int32_t down = seq / tp * tp, up = down + tp;
    char seq_hint[64];
    if (down > 0) snprintf(seq_hint, sizeof seq_hint, "%d or %d", (int)down, (int)up);
    else snprintf(seq_hint, sizeof seq_hint, "%d", (int)up);
    return host->set_error(PLAIT_ERR_INVALID_CONFIG,
                           "[%s] sequence_parallel = true splits each sequence over the tp ranks, but [parallel] "
                           "tp = %d does not divide [model] block_size = %d: use %s[model] block_size = %s, or "
                           "sequence_parallel = false",
                           SECTION, tp, (int)seq, tp_hint, seq_hint);
}

/* [run] precision = bf16 (the core's key; its choices fp32, tf32, bf16). */
static int run_is_bf16(const plait_host *host, const plait_config *cfg) {
    plait_value v;
    return host->config_get(cfg, "run", "precision", &v) == PLAIT_OK && v.i == 2;
}

static plait_status tp_create(const plait_parallel_init *init, void **out) {
    const plait_host *host = init->host;
    const plait_model_spec *m = init->model;
    int tp = init->mesh->tp;
    /* the model's MLP width and key/value heads (ABI 1.10; before it,
     * every model's MLP was 4·n_embd wide and every head its own) */
    const int grown = m->struct_size >= offsetof(plait_model_spec, ffn_hidden) + sizeof m->ffn_hidden;
    const int heads = strcmp(m->arch, "mlp") != 0, ffn = grown ? m->ffn_hidden : 4 * m->n_embd;
    const int kv = grown ? m->n_kv_head : m->n_head;
    /* where [parallel] tp was set, for the refusals below (a core before
     * config_where has none: the key alone then) */
    const char *where = PLAIT_HOST_HAS(host, config_where) ? host->config_where(init->config, "parallel", "tp") : NULL;
    const char *sep = where ? ": " : "";
    if (!where) where = "";
    if (tp > 1 && heads && m->n_head % tp != 0)
        return host->set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s%s[parallel] tp = %d does not divide [model] n_head = %d: tensor parallelism gives "
                               "each rank whole attention heads (choose tp among the divisors of n_head)",
                               where, sep, tp, m->n_head);
    if (tp > 1 && heads && kv % tp != 0)
        return host->set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s%s[parallel] tp = %d does not divide [model] n_kv_head = %d: tensor parallelism "
                               "gives each rank whole key/value heads with their query heads (choose tp among the "
                               "divisors of n_kv_head)",
                               where, sep, tp, kv);
    if (tp > 1 && ffn % tp != 0)
        return host->set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s%s[parallel] tp = %d does not divide the MLP width %d ([model] %s): "
                               "column-parallel products split it over the tp ranks (choose tp among its divisors)",
                               where, sep, tp, ffn, strcmp(m->arch, "llama") == 0 ? "ffn_hidden" : "4 x n_embd");
    plait_value v;
    plait_status cst = host->config_get(init->config, SECTION, "sequence_parallel", &v);
    if (cst != PLAIT_OK) return cst;
    const int sp = v.i != 0;
    if ((cst = host->config_get(init->config, SECTION, "overlap", &v)) != PLAIT_OK) return cst;
    const int overlap = v.i != 0;
    /* the mlp arch's blocks run no norm a sequence split would spare:
     * its model reads no such split, so the key would be ignored */
    if (sp && !heads) {
        const char *sw = PLAIT_HOST_HAS(host, config_where)
                             ? host->config_where(init->config, SECTION, "sequence_parallel")
                             : NULL;
        return host->set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s%s[%s] sequence_parallel = true splits a decoder's norms and residual stream "
                               "along the sequence (the gpt and llama archs); the mlp arch has none to split: set "
                               "sequence_parallel = false",
                               sw ? sw : "", sw ? ": " : "", SECTION);
    }
    if (sp && (cst = sequence_check(host, tp, m->block_size, heads ? m->n_head : m->block_size)) != PLAIT_OK)
        return cst;
    tp_state *s = calloc(1, sizeof *s);
    if (!s) return host->set_error(PLAIT_ERR_NO_MEMORY, "tp: out of memory");
    s->host = host;
    s->mesh = init->mesh;
    s->model = m;
    s->algo = init->deterministic ? PLAIT_ALGO_ORDERED : PLAIT_ALGO_AUTO;
    s->bf16_wire = tp > 1 && PLAIT_ABI_VERSION_MINOR(host->abi_version) >= 6 && run_is_bf16(host, init->config);
    s->ops = (plait_tp_ops){.struct_size = sizeof(plait_tp_ops),
                            .ctx = s,
                            .enter_backward = op_enter_backward,
                            .exit_forward = op_exit_forward,
                            .reduce_max = op_reduce_max,
                            .reduce_sum = op_reduce_sum,
                            .sequence_parallel = sp,
                            .allgather = op_allgather,
                            .reduce_scatter = op_reduce_scatter,
                            .wait = op_wait,
                            .overlap_input_grads = overlap,
                            .enter_backward_start = op_enter_backward_start};
    *out = s;
    return PLAIT_OK;
}

static plait_status tp_plan(void *state, plait_plan *plan) {
    tp_state *s = state;
    const plait_host *host = s->host;
    int tp = s->mesh->tp;
    if (tp == 1) return PLAIT_OK;
    int64_t vocab = s->model->vocab_size;
    int64_t padded = (vocab + tp - 1) / tp * tp;
    plan->vocab_padded = (int32_t)padded;
    for (int32_t g = 0; g < s->model->n_params; g++) {
        const plait_param *p = &s->model->params[g];
        plait_shard *sh = &plan->shards[g];
        int32_t groups = p->shard.groups > 1 ? p->shard.groups : 1; /* fused q,k,v: 3 */
        /* a column or row split cuts the dimension the model names
         * (p->shard.dim): a dense [out, in] weight's 0 or 1, a stacked
         * expert tensor's 1 or 2 */
        const int32_t cut = p->shard.dim;
        switch (p->tp_role) {
        case PLAIT_TP_COLUMN:
            *sh = (plait_shard){
                .dim = cut, .parts = tp, .index = s->mesh->tp_rank, .groups = groups, .padded_len = p->shape[cut]};
            break;
        case PLAIT_TP_ROW:
            *sh = (plait_shard){
                .dim = cut, .parts = tp, .index = s->mesh->tp_rank, .groups = 1, .padded_len = p->shape[cut]};
            break;
        case PLAIT_TP_VOCAB:
            *sh = (plait_shard){.dim = 0, .parts = tp, .index = s->mesh->tp_rank, .groups = 1, .padded_len = padded};
            break;
        case PLAIT_TP_REPLICATE:
        default:
            break;
        }
        if (sh->parts > 1 && sh->padded_len % ((int64_t)sh->groups * tp) != 0)
            return host->set_error(PLAIT_ERR_INVALID_CONFIG,
                                   "tp = %d does not divide %s (length %lld in %d group(s)) into equal slices", tp,
                                   p->name, (long long)sh->padded_len, sh->groups);
    }
    plan->tp_ops = &s->ops;
    return PLAIT_OK;
}

static plait_status tp_begin_step(void *state, int64_t step) {
    (void)step;
    tp_state *s = state;
    memset(&s->stats, 0, sizeof s->stats);
    s->stats.struct_size = sizeof s->stats;
    return PLAIT_OK;
}

static void tp_step_stats(void *state, plait_parallel_stats *out) {
    tp_state *s = state;
    s->stats.axis_bytes[1] = s->stats.bytes_sent;
    s->stats.axis_wait_seconds[1] = s->stats.wait_seconds;
    plait_fill_versioned(out, &s->stats, (uint32_t)sizeof s->stats);
}

static void tp_destroy(void *state) {
    tp_state *s = state;
    if (s && s->bf16_device) tp16_free(&s->wire16);
    free(state);
}

static const plait_key_decl tp_keys[] = {
    {sizeof(plait_key_decl), PLAIT_KEY_SAME_ON_ALL, "sequence_parallel", PLAIT_KEY_BOOL, "false", 0, 0, NULL,
     "Megatron-LM's sequence parallelism: the residual stream, norms and embedding output split along the "
     "sequence over the tp ranks, an all-gather before and a reduce-scatter after each tensor-parallel pair in "
     "place of the all-reduces (needs tp >= 2 dividing [model] block_size)"},
    {sizeof(plait_key_decl), PLAIT_KEY_SAME_ON_ALL, "overlap", PLAIT_KEY_BOOL, "true", 0, 0, NULL,
     "reduce each column-parallel product's input gradient over the tp ranks while its weight gradient is "
     "computed (Megatron-LM's asynchronous tensor-parallel reduction; the same sums, the same bits); false: "
     "every reduction blocks"},
};

static const plait_parallel_ops tp_ops = {
    .struct_size = sizeof(plait_parallel_ops),
    .axes = PLAIT_PARALLEL_AXIS_TP,
    .create = tp_create,
    .plan = tp_plan,
    .begin_step = tp_begin_step,
    .step_stats = tp_step_stats,
    .destroy = tp_destroy,
};

static const plait_plugin_desc tp_desc = {
    .struct_size = sizeof(plait_plugin_desc),
    .magic = PLAIT_PLUGIN_MAGIC,
    .abi_major = PLAIT_ABI_MAJOR,
    .abi_minor = PLAIT_ABI_MINOR,
    .kind = PLAIT_KIND_PARALLEL,
    .name = "tp",
    .version = "0.1.0",
    .description = "tensor parallelism (Megatron): column/row-parallel linears, vocab-parallel embedding and loss",
    .ops = &tp_ops,
    .keys = tp_keys,
    .n_keys = sizeof tp_keys / sizeof tp_keys[0],
    .key_size = sizeof(plait_key_decl),
};

PLAIT_PLUGIN_DEFINE_ENTRY("parallel/tp", 0, NULL, &tp_desc)
