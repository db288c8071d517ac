/* Stage costs from the model's shape: TP slices, the pipeline partition, the schedules' live micro-batches. */
#include "cost/stages.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <plait/partition_util.h>

#include "cost/activations.h"
#include "cost/layouts.h"
#include "model/model.h"
#include "model/tied.h"
#include "runtime/error.h"

#define TP_CACHE 32
#define LIVE_CACHE 256

/* One tp size's slices: per layer, the parameter elements a rank holds
 * (tied copies apart) and those of its bf16 weight copy, the tied copy's
 * elements, the vocabulary padded. */
typedef struct tp_slices {
    int tp;
    double *layer_numel;   /* n_layers entries */
    double *layer_tensor;  /* n_layers entries (in layer_numel's block): its largest tensor's slice, experts apart */
    double *layer_expert;  /* n_layers entries (the same block): its largest routed experts' tensor's slice, all E */
    double *layer_copy;    /* n_layers entries: the bf16 copy's elements under bf16 activations */
    double *layer_master;  /* n_layers entries: of those, unrounded, the tied copy's left out */
    double *layer_tensors; /* n_layers entries: the parameter tensors of a layer (tied copies apart) */
    double *layer_xcopy;   /* n_layers entries: the experts' copy where they run bf16, all E (ep divides) */
    double *layer_xmaster; /* n_layers entries: of those, unrounded */
    double copy_numel;     /* the head's tied copy of the token embedding */
    double vocab_padded;
} tp_slices;

struct plait_cost_model {
    plait_model_desc *desc;
    const plait_model_spec *spec;
    int n_layers;           /* embedding + blocks + head */
    int copy_layer, copy_source; /* the tied copy's layer and its original's, or -1 */
    tp_slices tps[TP_CACHE];
    int n_tps;
    int32_t **bounds;       /* per chunk count k (1..n_layers), the k+1 bounds, or NULL until asked */
    /* live slots per (schedule, p, v, m): p x v entries, stage-major;
     * and the boundary pool's peak per stage (p entries), which also
     * depends on whether the first and last chunks hold one layer only */
    struct live_entry {
        char schedule[16];
        int p, v, m, alone;
        double *slots, *pool;
    } live[LIVE_CACHE];
    int n_live, next_live;
    /* a mixture of experts (E > 0): k routes a token, F an expert's width,
     * and per layer its routed experts' parameter elements (0: dense) */
    plait_cost_moe moe;
    double *expert_numel; /* n_layers entries */
    int residual_bf16;    /* the config's [run] residual is bf16 */
    int offload;          /* its [model] recompute_offload is host */
    double *expert_cut;   /* of which tp splits (each expert's width): n_layers entries */
    /* [parallel.pp] stages, where the config sets it: its ranges (0: not
     * set; -1: they make no partition of the layers, `stages_why` says
     * why) and their bounds, the partition of a pipeline of that many
     * chunks, as the pp plugin takes them */
    int32_t stages_k;
    int32_t *stages_bounds;
    char stages_why[320];
};

/* The model's experts: their count, routes and width, and each layer's
 * routed experts' parameters (PLAIT_PARAM_EXPERT), which ep splits. */
static void moe_of(plait_cost_model *m, const plait_config *cfg) {
    plait_cost_moe_of(cfg, m->spec->ffn_hidden, &m->moe);
    if (m->moe.E <= 0) return;
    for (int32_t g = 0; g < m->spec->n_params; g++) {
        const plait_param *p = &m->spec->params[g];
        if (!(p->flags & PLAIT_PARAM_EXPERT) || p->layer < 0 || p->layer >= m->n_layers) continue;
        double e = 1;
        for (int k = 0; k < p->ndim; k++) e *= (double)p->shape[k];
        m->expert_numel[p->layer] += e;
        if (p->tp_role != PLAIT_TP_REPLICATE) m->expert_cut[p->layer] += e;
    }
}

/* The config's explicit partition ([parallel.pp] stages, the pp plugin's
 * key: absent where another parallel plugin runs), read as the plugin
 * reads it: a pipeline of as many chunks as it gives ranges takes it, any
 * other is refused, and ranges that make no partition refuse every
 * pipeline with the plugin's words. */
static plait_status explicit_stages(plait_cost_model *m, const plait_config *cfg) {
    plait_value v;
    if (plait_config_get(cfg, "parallel.pp", "stages", &v) != PLAIT_OK || !v.s) return PLAIT_OK;
    int32_t k = plait_partition_ranges(v.s);
    if (k == 0) return PLAIT_OK;
    m->stages_bounds = malloc(((size_t)k + 1) * sizeof *m->stages_bounds);
    if (!m->stages_bounds) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    char err[256];
    if (plait_partition_parse(v.s, m->n_layers, k, m->stages_bounds, err, sizeof err) != PLAIT_OK) {
        snprintf(m->stages_why, sizeof m->stages_why, "[parallel.pp] %s", err);
        k = -1;
    }
    m->stages_k = k;
    return PLAIT_OK;
}

plait_status plait_cost_model_new(plait_config *cfg, plait_cost_model **out) {
    *out = NULL;
    plait_cost_model *m = calloc(1, sizeof *m);
    if (!m) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    plait_status st = plait_model_describe(cfg, 1, &m->desc);
    if (st != PLAIT_OK) {
        free(m);
        return st;
    }
    m->spec = plait_model_desc_spec(m->desc);
    m->n_layers = m->spec->n_layers;
    m->copy_layer = m->copy_source = -1;
    for (int32_t g = 0; g < m->spec->n_params; g++) {
        const plait_param *p = &m->spec->params[g];
        if (!plait_tied_is_copy(p)) continue;
        m->copy_layer = p->layer;
        m->copy_source = plait_tied_source(m->spec, p)->layer;
    }
    m->bounds = calloc((size_t)m->n_layers + 1, sizeof *m->bounds);
    m->expert_numel = calloc((size_t)m->n_layers, sizeof *m->expert_numel);
    m->expert_cut = calloc((size_t)m->n_layers, sizeof *m->expert_cut);
    if (!m->bounds || !m->expert_numel || !m->expert_cut) {
        plait_cost_model_free(m);
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    }
    moe_of(m, cfg);
    m->residual_bf16 = plait_cost_config_residual_bf16(cfg);
    m->offload = plait_cost_config_recompute_offload(cfg);
    if ((st = explicit_stages(m, cfg)) != PLAIT_OK) {
        plait_cost_model_free(m);
        return st;
    }
    *out = m;
    return PLAIT_OK;
}

void plait_cost_model_free(plait_cost_model *m) {
    if (!m) return;
    for (int i = 0; i < m->n_tps; i++) {
        free(m->tps[i].layer_numel);
        free(m->tps[i].layer_copy);
        free(m->tps[i].layer_tensors);
        free(m->tps[i].layer_master);
        free(m->tps[i].layer_xcopy);
    }
    for (int k = 0; m->bounds && k <= m->n_layers; k++) free(m->bounds[k]);
    for (int i = 0; i < m->n_live; i++) {
        free(m->live[i].slots);
        free(m->live[i].pool);
    }
    free(m->bounds);
    free(m->stages_bounds);
    free(m->expert_numel);
    free(m->expert_cut);
    plait_model_desc_free(m->desc);
    free(m);
}

double plait_cost_model_params(const plait_cost_model *m) { return (double)m->spec->total_numel; }

int plait_cost_model_attention(const plait_cost_model *m) { return strcmp(m->spec->arch, "mlp") != 0; }

const char *plait_cost_model_refuses(const plait_cost_model *m, int tp, int pp, int v, char *why, size_t len) {
    const plait_model_spec *s = m->spec;
    /* the tp and pp plugins' own rules and words, and the model's */
    if (tp > 1 && strcmp(s->arch, "mlp") != 0 && s->n_head % tp != 0)
        snprintf(why, len,
                 "[parallel] tp = %d does not divide [model] n_head = %d: tensor parallelism gives each rank whole "
                 "attention heads (choose tp among the divisors of n_head)",
                 tp, s->n_head);
    else if (tp > 1 && strcmp(s->arch, "mlp") != 0 && s->n_kv_head % tp != 0)
        snprintf(why, len,
                 "[parallel] tp = %d does not divide [model] n_kv_head = %d: tensor parallelism gives each rank whole "
                 "key/value heads with their query heads (choose tp among the divisors of n_kv_head)",
                 tp, s->n_kv_head);
    else if (tp > 1 && s->ffn_hidden % tp != 0)
        snprintf(why, len, "[parallel] tp = %d does not divide the MLP width %d", tp, s->ffn_hidden);
    else if (tp > 1 && m->moe.E > 0 && m->moe.F % tp != 0) /* the model's own rule (model/model.c) */
        snprintf(why, len,
                 "[parallel] tp = %d does not divide [model] moe_ffn_hidden = %lld: each expert's width splits over "
                 "the tensor-parallel ranks (choose tp among the divisors of moe_ffn_hidden)",
                 tp, (long long)m->moe.F);
    else if (v > 64)
        snprintf(why, len, "virtual stages v = %d: must be in [1, 64]", v);
    else if (pp > 1 && m->stages_k < 0) snprintf(why, len, "%s", m->stages_why);
    else if (pp > 1 && m->stages_k > 0 && (int64_t)pp * v != m->stages_k)
        snprintf(why, len,
                 "[parallel.pp] stages gives %d layer ranges, one per model chunk: [parallel] pp = %d x "
                 "virtual_stages = %d makes %lld chunks (pipelines of %d chunks take it)",
                 m->stages_k, pp, v, (long long)pp * v, m->stages_k);
    else if ((int64_t)pp * v > m->n_layers)
        snprintf(why, len,
                 "[parallel] pp = %d x virtual_stages = %d makes %lld model chunks, but the model has only %d layers "
                 "(embedding, %d blocks, head) and each chunk needs one",
                 pp, v, (long long)pp * v, m->n_layers, s->n_layer);
    else
        return NULL;
    return why;
}

static const tp_slices *slices(plait_cost_model *m, int tp) {
    for (int i = 0; i < m->n_tps; i++)
        if (m->tps[i].tp == tp) return &m->tps[i];
    if (m->n_tps == TP_CACHE) { /* a space of more tp sizes than that: forget the oldest */
        free(m->tps[0].layer_numel);
        free(m->tps[0].layer_copy);
        free(m->tps[0].layer_master);
        free(m->tps[0].layer_tensors);
        free(m->tps[0].layer_xcopy);
        memmove(&m->tps[0], &m->tps[1], (TP_CACHE - 1) * sizeof m->tps[0]);
        m->n_tps--;
    }
    tp_slices *t = &m->tps[m->n_tps];
    memset(t, 0, sizeof *t);
    t->tp = tp;
    t->layer_numel = calloc(3 * (size_t)m->n_layers, sizeof *t->layer_numel);
    t->layer_copy = calloc((size_t)m->n_layers, sizeof *t->layer_copy);
    t->layer_master = calloc((size_t)m->n_layers, sizeof *t->layer_master);
    t->layer_tensors = calloc((size_t)m->n_layers, sizeof *t->layer_tensors);
    t->layer_xcopy = calloc(2 * (size_t)m->n_layers, sizeof *t->layer_xcopy);
    t->layer_xmaster = t->layer_xcopy ? t->layer_xcopy + m->n_layers : NULL;
    if (!t->layer_numel || !t->layer_copy || !t->layer_master || !t->layer_tensors || !t->layer_xcopy) {
        free(t->layer_numel);
        free(t->layer_copy);
        free(t->layer_master);
        free(t->layer_tensors);
        free(t->layer_xcopy);
        return NULL;
    }
    t->layer_tensor = t->layer_numel + m->n_layers;
    t->layer_expert = t->layer_tensor + m->n_layers;
    m->n_tps++;
    /* the tp plugin pads the vocabulary to a multiple of tp and cuts every
     * split dimension into tp equal slices */
    double vocab = m->spec->vocab_size;
    t->vocab_padded = tp > 1 ? ceil(vocab / tp) * tp : vocab;
    for (int32_t g = 0; g < m->spec->n_params; g++) {
        const plait_param *p = &m->spec->params[g];
        double e = (double)p->numel;
        if (tp > 1 && p->shard.dim >= 0 && p->shape[p->shard.dim] > 0) {
            double len = p->tp_role == PLAIT_TP_VOCAB ? t->vocab_padded : (double)p->shape[p->shard.dim];
            e = e / (double)p->shape[p->shard.dim] * len / tp;
        }
        if (p->layer >= 0 && p->layer < m->n_layers && plait_model_bf16_copied(m->spec, g, PLAIT_BF16_COPY_HEAD)) {
            t->layer_copy[p->layer] += (double)plait_model_bf16_copy_numel((size_t)e);
            if (!plait_tied_is_copy(p)) t->layer_master[p->layer] += e;
        } else if (p->layer >= 0 && p->layer < m->n_layers &&
                   plait_model_bf16_copied(m->spec, g, PLAIT_BF16_COPY_EXPERTS)) {
            t->layer_xcopy[p->layer] += (double)plait_model_bf16_copy_numel((size_t)e);
            t->layer_xmaster[p->layer] += e;
        }
        if (plait_tied_is_copy(p)) {
            t->copy_numel = e;
        } else if (p->layer >= 0 && p->layer < m->n_layers) {
            t->layer_numel[p->layer] += e;
            t->layer_tensors[p->layer]++;
            double *big = p->flags & PLAIT_PARAM_EXPERT ? &t->layer_expert[p->layer] : &t->layer_tensor[p->layer];
            if (e > *big) *big = e;
        }
    }
    return t;
}

/* The partition of the layers into k chunks the pp plugin cuts (the
 * SDK's plait_partition_balanced, by each layer's forward FLOPs; the
 * config's [parallel.pp] stages where it gives k ranges), cached
 * per k; NULL where it has none (k out of range, memory). */
static const int32_t *partition(plait_cost_model *m, int k) {
    if (k < 1 || k > m->n_layers) return NULL;
    if (k > 1 && k == m->stages_k) return m->stages_bounds; /* the config's own */
    if (m->bounds[k]) return m->bounds[k];
    int n = m->n_layers;
    int32_t *b = malloc(((size_t)k + 1) * sizeof *b);
    double *costs = malloc((size_t)n * sizeof *costs);
    int ok = b && costs;
    for (int i = 0; ok && i < n; i++) costs[i] = m->spec->layers[i].flops_per_token;
    ok = ok && plait_partition_balanced(costs, n, k, b, NULL, 0) == PLAIT_OK;
    free(costs);
    if (!ok) {
        free(b);
        return NULL;
    }
    m->bounds[k] = b;
    return b;
}

/* The stage holding `layer` under bounds of K chunks over p stages. */
static int stage_of(const int32_t *b, int K, int p, int layer) {
    for (int k = 0; k < K; k++)
        if (layer >= b[k] && layer < b[k + 1]) return k % p;
    return -1;
}

/* The i-th (chunk, micro-batch) of a stage's forward (or backward) order:
 * micro-batches in groups (one of m for gpipe, else max(1, m / p) groups
 * whose sizes differ by at most one, the larger first), each group through
 * chunk 0, 1, ... (backward: the last chunk first). As plugins/parallel/pp/schedule.c
 * orders them. */
typedef struct groups {
    int64_t n, base, extra;
} groups;

static int chunk_at(const groups *g, int v, int backward, int64_t i) {
    int64_t big = g->extra * (g->base + 1) * v, size, o;
    if (i < big) {
        size = g->base + 1;
        o = i - i / (size * v) * size * v;
    } else {
        size = g->base;
        int64_t rest = i - big;
        o = rest - rest / (size * v) * size * v;
    }
    int c = (int)(o / size);
    return backward ? v - 1 - c : c;
}

/* A stage's forward and backward orders (chunk_at over `g`), its
 * forwards in all (`total`), and how many of them run before its first
 * backward (returned), as the schedules' instruction lists run them. */
static int64_t orders(const char *schedule, int p, int stage, int m, int v, groups *g, int64_t *total) {
    const int gpipe = strcmp(schedule, "gpipe") == 0;
    *g = (groups){.n = gpipe || m < p ? 1 : m / p};
    g->base = m / g->n;
    g->extra = m % g->n;
    int64_t largest = g->base + (g->extra > 0);
    *total = (int64_t)m * v;
    int64_t warmup = gpipe ? *total : (int64_t)(p - stage - 1) + (int64_t)(v - 1) * largest;
    return warmup > *total ? *total : warmup;
}

/* The slots stage `stage` allocates, by chunk: the chunks of alike layers
 * (class_of[c], the first chunk alike to chunk c) share theirs
 * (train/step_pipeline.c's plait_step_slot), so a class's first chunk
 * gets the most micro-batches its chunks keep alive at once and the
 * others none; summed over the chunks. Warm-up forwards, then one forward
 * and one backward in turn, then the last backwards, as the schedules'
 * instruction lists run; zb1 holds a slot until the weight half, min(p, m)
 * of them. */
static double live_slots(const char *schedule, int p, int stage, int m, int v, const int *class_of, double *per_chunk) {
    for (int c = 0; c < v; c++) per_chunk[c] = 0;
    if (p <= 1) {
        per_chunk[0] = 1;
        return 1;
    }
    if (strcmp(schedule, "zb1") == 0) {
        per_chunk[0] = p < m ? p : m;
        return per_chunk[0];
    }
    groups g;
    int64_t total, warmup = orders(schedule, p, stage, m, v, &g, &total);
    double live[64] = {0};
    int64_t f = 0, b = 0;
    for (; f < total; f++) {
        int k = class_of[chunk_at(&g, v, 0, f)];
        if (++live[k] > per_chunk[k]) per_chunk[k] = live[k];
        if (f >= warmup) live[class_of[chunk_at(&g, v, 1, b++)]]--;
    }
    double sum = 0;
    for (int c = 0; c < v; c++) sum += per_chunk[c];
    return sum;
}

/* The boundary pool's buffers a stage's step holds at its peak
 * (model/model_slots.c), replaying its instructions as the executor runs
 * them (train/run_step.c, train/step_pipeline.c): a forward whose output
 * is sent takes one, which its send hands to the ring of sends in flight;
 * a backward holds the gradients of both parities (one where its chunk is
 * the embedding or the head alone: `alone` bit 0, bit 1), the one of
 * them received first, and gives them back after it but for the input
 * gradient it sends, which joins the ring; a send waits for the one
 * `window` before it of its kind, and gives that one's buffer back (the
 * step's end, the rest). zb1's weight halves come right after their input
 * halves on the first stage, the one whose (embedding) chunk holds its
 * gradient until then. The larger of a training step's peak and an
 * evaluation pass's (forwards only). */
static double pool_peak(const char *schedule, int p, int stage, int m, int v, int alone) {
    if (p <= 1) return 2; /* one chunk: a backward's two gradients */
    const int K = p * v;
    groups g;
    int64_t total, warmup = orders(schedule, p, stage, m, v, &g, &total);
    const int64_t window = v == 1 ? 1 : warmup + 1 < total ? p + 1 : total; /* plait_step_send_window */
    int64_t peak = 0;
    for (int train = 0; train < 2; train++) {
        int64_t held = 0, acts = 0, grads = 0, b = 0;
        for (int64_t f = 0; f < total + (train ? warmup : 0); f++) {
            if (f < total) { /* a forward and its send */
                int k = chunk_at(&g, v, 0, f) * p + stage;
                if (k < K - 1) {
                    if (++held > peak) peak = held;
                    if (acts == window) held--;
                    else acts++;
                }
            }
            if (!train || f < warmup) continue;
            int k = chunk_at(&g, v, 1, b++) * p + stage; /* a backward and its sends */
            int need = (k == 0 && (alone & 1)) || (k == K - 1 && (alone & 2)) ? 1 : 2;
            held += need;
            if (held > peak) peak = held;
            held -= k > 0 ? need - 1 : need;
            if (k > 0 && grads == window) held--;
            else if (k > 0) grads++;
        }
    }
    return (double)peak;
}

/* The kind of layer ly of the model (0..n_layers-1), as the executor
 * tells alike chunks apart (plait_model_layer_kind). */
static int layer_kind(const plait_cost_model *model, int ly) {
    return plait_model_layer_kind(ly, model->n_layers - 2, model->expert_numel[ly] > 0);
}

/* class_of[c] for stage st's v chunks of partition b (p x v chunks): the
 * first chunk c' <= c whose layers are alike to c's. */
static void chunk_classes(const plait_cost_model *model, const int32_t *b, int p, int v, int st, int *class_of) {
    for (int c = 0; c < v; c++) {
        const int k = c * p + st;
        class_of[c] = c;
        for (int o = 0; o < c && class_of[c] == c; o++) {
            const int j = o * p + st;
            int same = b[k + 1] - b[k] == b[j + 1] - b[j];
            for (int i = 0; same && i < b[k + 1] - b[k]; i++)
                same = layer_kind(model, b[k] + i) == layer_kind(model, b[j] + i);
            if (same) class_of[c] = o;
        }
    }
}

/* live_slots and pool_peak of every stage of (schedule, p, v, m), cached
 * (the chunks' layers, and so their classes, follow from p x v: the
 * model's partition). */
static const struct live_entry *live_of(plait_cost_model *model, const char *schedule, int p, int v, int m, int alone) {
    for (int i = 0; i < model->n_live; i++) {
        struct live_entry *e = &model->live[i];
        if (e->p == p && e->v == v && e->m == m && e->alone == alone && !strcmp(e->schedule, schedule)) return e;
    }
    double *slots = malloc((size_t)p * (size_t)v * sizeof *slots), *pool = malloc((size_t)p * sizeof *pool);
    if (!slots || !pool) {
        free(slots);
        free(pool);
        return NULL;
    }
    const int32_t *b = partition(model, p * v);
    int class_of[64];
    for (int st = 0; st < p; st++) {
        if (b && v <= 64) chunk_classes(model, b, p, v, st, class_of);
        else
            for (int c = 0; c < v && c < 64; c++) class_of[c] = c;
        live_slots(schedule, p, st, m, v, class_of, slots + (size_t)st * v);
        pool[st] = pool_peak(schedule, p, st, m, v, alone);
    }
    struct live_entry *e;
    if (model->n_live < LIVE_CACHE) {
        e = &model->live[model->n_live++];
    } else { /* full: replace the oldest */
        e = &model->live[model->next_live];
        model->next_live = (model->next_live + 1) % LIVE_CACHE;
        free(e->slots);
        free(e->pool);
    }
    snprintf(e->schedule, sizeof e->schedule, "%s", schedule);
    e->p = p;
    e->v = v;
    e->m = m;
    e->alone = alone;
    e->slots = slots;
    e->pool = pool;
    return e;
}

/* Layer ly's bf16 copy into rank r (x: the share of its experts' copy,
 * 1 / ep where they run bf16, else 0); returns its masters, the weights
 * read only through the copy (those ZeRO-3 gathers in bf16). A tied
 * copy's is what the masters leave, each rounded up to 8 (a bound). */
static double add_copy(plait_cost_rank *r, const tp_slices *t, int ly, double x) {
    const double copy = t->layer_copy[ly] + x * t->layer_xcopy[ly];
    const double master = t->layer_master[ly] + x * t->layer_xmaster[ly];
    r->weight_copy_numel += copy;
    r->master_numel += master;
    if (copy > r->largest_copy_numel) r->largest_copy_numel = copy;
    const double tied = copy - master > 8 * t->layer_tensors[ly] ? copy - master : 0;
    if (tied > r->largest_tied_copy_numel) r->largest_tied_copy_numel = tied;
    return master;
}

int plait_cost_model_stages(plait_cost_model *m, const plait_cost_layout *l, int64_t global_batch,
                            plait_precision precision, const plait_cost_device *dev, plait_cost_rank *stages) {
    const plait_model_spec *spec = m->spec;
    int p = l->pp, v = l->chunks > 0 ? l->chunks : 1, tp = l->tp, K = p * v, L = spec->n_layer;
    int ep = l->ep > 1 && m->moe.E > 0 ? l->ep : 1;
    const tp_slices *t = slices(m, tp);
    const int32_t *b = partition(m, K);
    if (!t || !b) return -1;
    int mb = (int)(global_batch / l->dp / l->micro_batch);
    const char *sched = p > 1 ? l->schedule : "1f1b";
    plait_cost_shape s;
    const plait_cost_shape_in in = {.B = (double)l->micro_batch,
                                    .tp = tp,
                                    .tensor_parallel = tp > 1, /* the tp plugin's ops exist from tp 2 */
                                    .vocab_padded = tp > 1 ? t->vocab_padded : 0,
                                    .recompute = l->recompute,
                                    .sp = l->sp && tp > 1,
                                    .cp = l->cp,
                                    .split = strcmp(sched, "zb1") == 0,
                                    .precision = precision,
                                    .device = dev,
                                    .residual_bf16 = m->residual_bf16,
                                    .offload = m->offload};
    plait_cost_shape_init(&s, spec, &in);
    /* a cp rank computes T / cp tokens of each sequence (s.T) */
    double tokens = (double)l->micro_batch * s.T * mb, bsh = s.B * s.T * s.C;
    /* the first chunk the embedding alone, the last the head alone */
    const int alone = (b[1] == 1) | (b[K - 1] == L + 1) << 1;
    const struct live_entry *lv = live_of(m, sched, p, v, mb, alone);
    if (!lv) return -1;
    const double *all_live = lv->slots;
    for (int st = 0; st < p; st++) {
        plait_cost_rank *r = &stages[st];
        memset(r, 0, sizeof *r);
        r->dp = l->dp;
        r->tp = tp;
        r->pp = p;
        r->stage = st;
        r->micro_batches = mb;
        r->rows = (double)l->micro_batch * s.T;
        r->width = s.C / tp;
        r->chunks = v;
        r->bf16 = s.bf16;
        r->sp = s.sp;
        r->msg_bytes = plait_cost_message_bytes(&s);
        int blocks = 0, emb = 0, head = 0, sparse = 0;
        double master = 0; /* the layer's weights read only through the bf16 copy */
        const double *live = all_live + (size_t)st * v;
        for (int c = 0; c < v; c++) {
            int k = c * p + st, first = b[k], last = b[k + 1] - 1;
            r->act_bytes += live[c] * plait_cost_slot_bytes(&s, first, last);
            r->host_act_bytes += live[c] * plait_cost_slot_host_bytes(&s, first, last);
            r->offload_bytes += 2.0 * mb * plait_cost_slot_host_bytes(&s, first, last);
            for (int ly = first; ly <= last; ly++) {
                double e = t->layer_numel[ly], f = spec->layers[ly].flops_per_token;
                if (m->expert_numel[ly] > 0) { /* a sparse block: its E / ep experts, at tp their width's slice */
                    const double held = m->expert_numel[ly] - m->expert_cut[ly] * (1.0 - 1.0 / tp);
                    e -= held * (1.0 - 1.0 / ep);
                    r->expert_numel += held / ep;
                    /* recompute = full: held only from its rerun to its backward (shared below),
                     * under a split backward to its weight half (a bound, as rank_cost.c) */
                    const double kept = s.recompute != 2 ? plait_cost_held_bytes(&m->moe, &s, tp, ep) +
                                                               plait_cost_moe_acts_bytes(&m->moe, &s, tp, ep)
                                        : s.split ? plait_cost_held_bytes(&m->moe, &s, tp, ep)
                                                  : 0;
                    r->act_bytes += live[c] * (kept + plait_cost_moe_split_bytes(&m->moe, &s, tp, ep) -
                                               plait_cost_sparse_unkept_bytes(&s));
                    sparse++;
                }
                /* the experts' E / ep where they run bf16 */
                if (s.bf16) master = add_copy(r, t, ly, plait_cost_experts_bf16(&m->moe, &s, tp) ? 1.0 / ep : 0);
                /* a tied copy counts where its original is not on the stage */
                r->tensors += t->layer_tensors[ly];
                if (ly == m->copy_layer && stage_of(b, K, p, m->copy_source) != st) {
                    e += t->copy_numel;
                    r->tensors++;
                }
                r->param_numel += e;
                if (e > r->largest_layer_numel) r->largest_layer_numel = e;
                if (s.bf16 && e - master / 2 > r->largest_gather_numel) r->largest_gather_numel = e - master / 2;
                master = 0;
                /* its largest tensor's slice: a checkpoint's buffer (ckpt_cost.h) */
                double big = t->layer_tensor[ly] > t->layer_expert[ly] / ep ? t->layer_tensor[ly]
                                                                            : t->layer_expert[ly] / ep;
                if (ly == m->copy_layer && stage_of(b, K, p, m->copy_source) != st && t->copy_numel > big)
                    big = t->copy_numel;
                if (big > r->largest_tensor_numel) r->largest_tensor_numel = big;
                plait_cost_add_layer_flops(&s, f, ly >= 1 && ly <= L, tokens, tp, r);
                blocks += ly >= 1 && ly <= L;
                emb |= ly == 0;
                head |= ly == L + 1;
            }
            /* every chunk boundary sends the activation forward and its
             * gradient back, once per micro-batch */
            r->pp_msgs += ((k < K - 1) + (k > 0)) * (double)mb;
        }
        /* the boundary pool's peak, the backward scratch the chunks share,
         * and the sparse blocks' */
        r->act_bytes += lv->pool[st] * plait_cost_boundary_bytes(&s);
        r->act_bytes += plait_cost_scratch_bytes(&s);
        if (sparse > 0) r->act_bytes += plait_cost_moe_scratch_bytes(&m->moe, &s, tp, ep);
        if (sparse > 0) r->act_bytes += plait_cost_moe_shared_bytes(&m->moe, &s, tp, ep);
        plait_cost_ring_traffic(&s, blocks, mb, r);
        plait_cost_ep_traffic(&m->moe, &s, ep, sparse, mb, r);
        if (tp > 1) plait_cost_tp_traffic(&s, blocks, sparse, emb, head, mb, r);
        if (p > 1) {
            r->pp_msg_elems = s.sp ? bsh / tp : bsh; /* under sp each rank sends its part of the sequence */
            r->bubble = plait_cost_bubble(sched, p, mb, v);
        } else {
            r->pp_msgs = 0;
        }
    }
    return 0;
}
