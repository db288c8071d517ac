#include "zero/zero_harness.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/comm_threads.h"
#include "config/config.h"
#include "kernels/kernels_vector.h"
#include "plugin/loader.h"
#include "runtime/error.h"
#include "runtime/memory.h"
#include "coll/sum_tree.h"
#include "host/host_table.h"
#include "support/offset_host.h"

static const char *const which_name[ZH_WHICH] = {"param", "exp_avg", "exp_avg_sq"};

/* ---- model ------------------------------------------------------------ */

size_t zh_numel(const zh_pspec *p) { return (size_t)p->rows * (size_t)(p->cols ? p->cols : 1); }

static void add_param(zh_model *m, const char *name, int32_t layer, int64_t rows, int64_t cols, uint32_t flags,
                      int32_t tied_to, float amp) {
    m->p[m->n_params++] = (zh_pspec){name, layer, rows, cols, flags, tied_to, amp};
}

void zh_model_gpt(zh_model *m, int blocks, int64_t c, int64_t v, int64_t t) {
    static const char *const names[][5] = {
        {"h.0.ln.weight", "h.0.ln.bias", "h.0.fc.weight", "h.0.fc.bias", "h.0.proj.weight"},
        {"h.1.ln.weight", "h.1.ln.bias", "h.1.fc.weight", "h.1.fc.bias", "h.1.proj.weight"},
        {"h.2.ln.weight", "h.2.ln.bias", "h.2.fc.weight", "h.2.fc.bias", "h.2.proj.weight"},
        {"h.3.ln.weight", "h.3.ln.bias", "h.3.fc.weight", "h.3.fc.bias", "h.3.proj.weight"},
        {"h.4.ln.weight", "h.4.ln.bias", "h.4.fc.weight", "h.4.fc.bias", "h.4.proj.weight"},
        {"h.5.ln.weight", "h.5.ln.bias", "h.5.fc.weight", "h.5.fc.bias", "h.5.proj.weight"},
    };
    memset(m, 0, sizeof *m);
    if (blocks > 6) blocks = 6;
    add_param(m, "wte.weight", 0, v, c, 0, -1, 0.5f);
    add_param(m, "wpe.weight", 0, t, c, 0, -1, 0.2f);
    for (int b = 0; b < blocks; b++) {
        int32_t l = 1 + b;
        add_param(m, names[b][0], l, c, 0, PLAIT_PARAM_NO_DECAY, -1, 0.05f);
        add_param(m, names[b][1], l, c, 0, PLAIT_PARAM_NO_DECAY, -1, 0.05f);
        add_param(m, names[b][2], l, 3 * c, c, 0, -1, 1.0f);
        add_param(m, names[b][3], l, 3 * c, 0, PLAIT_PARAM_NO_DECAY, -1, 0.3f);
        add_param(m, names[b][4], l, c, 3 * c, 0, -1, 0.7f);
    }
    int32_t head = 1 + blocks;
    add_param(m, "ln_f.weight", head, c, 0, PLAIT_PARAM_NO_DECAY, -1, 0.05f);
    add_param(m, "ln_f.bias", head, c, 0, PLAIT_PARAM_NO_DECAY, -1, 0.05f);
    add_param(m, "lm_head.weight", head, v, c, PLAIT_PARAM_TIED_COPY, 0, 0.4f);
    m->n_layers = head + 1;
}

size_t zh_model_psi(const zh_model *m) {
    size_t n = 0;
    for (int32_t i = 0; i < m->n_params; i++)
        if (m->p[i].tied_to < 0) n += zh_numel(&m->p[i]);
    return n;
}

/* ---- snapshots ---------------------------------------------------------- */

void zh_snapshot_alloc(zh_snapshot *s, const zh_model *m) {
    memset(s, 0, sizeof *s);
    for (int w = 0; w < ZH_WHICH; w++)
        for (int32_t i = 0; i < m->n_params; i++)
            if (m->p[i].tied_to < 0) s->t[w][i] = calloc(zh_numel(&m->p[i]), sizeof(float));
}

void zh_snapshot_free(zh_snapshot *s) {
    for (int w = 0; w < ZH_WHICH; w++)
        for (int32_t i = 0; i < ZH_MAX_PARAMS; i++) free(s->t[w][i]);
    memset(s, 0, sizeof *s);
}

/* Bitwise equality of two floats (NaNs and signed zeros told apart), without
 * a memcmp call a sanitizer intercepts per element. */
static int same_bits(float a, float b) {
    uint32_t x, y;
    memcpy(&x, &a, sizeof x);
    memcpy(&y, &b, sizeof y);
    return x == y;
}

int zh_snapshot_equal(const zh_model *m, const zh_snapshot *a, const zh_snapshot *b, int states, char *why,
                      size_t len) {
    for (int w = 0; w < (states ? ZH_WHICH : 1); w++)
        for (int32_t i = 0; i < m->n_params; i++) {
            if (m->p[i].tied_to >= 0) continue;
            size_t n = zh_numel(&m->p[i]);
            if (memcmp(a->t[w][i], b->t[w][i], n * sizeof(float)) == 0) continue;
            for (size_t k = 0; k < n; k++)
                if (!same_bits(a->t[w][i][k], b->t[w][i][k])) {
                    snprintf(why, len, "%s of %s[%zu]: %.9g vs %.9g", which_name[w], m->p[i].name, k,
                             (double)a->t[w][i][k], (double)b->t[w][i][k]);
                    return 0;
                }
        }
    if (states && a->optim_step != b->optim_step) {
        snprintf(why, len, "optimizer step %lld vs %lld", (long long)a->optim_step, (long long)b->optim_step);
        return 0;
    }
    return 1;
}

double zh_snapshot_maxrel(const zh_model *m, const zh_snapshot *a, const zh_snapshot *b, double atol) {
    double worst = 0;
    for (int32_t i = 0; i < m->n_params; i++) {
        if (m->p[i].tied_to >= 0) continue;
        size_t n = zh_numel(&m->p[i]);
        for (size_t k = 0; k < n; k++) {
            double d = fabs((double)a->t[0][i][k] - (double)b->t[0][i][k]) / (fabs((double)b->t[0][i][k]) + atol);
            if (!(d <= worst)) worst = d; /* NaN wins */
        }
    }
    return worst;
}

/* ---- deterministic synthetic values ------------------------------------- */

static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* noise(a, b, c, d) = from_hash(mix(mix(mix(mix(a) ^ b) ^ c) ^ d)), in [-1, 1).
 * A loop over the last varying argument hashes the ones before it once
 * (noise_prefix) and each element from there: the same values, a quarter
 * of the hashing (the harness's own arithmetic is most of a ZeRO test's time
 * under the sanitizers). */
static float from_hash(uint64_t h) { return (float)((double)(h >> 11) / 9007199254740992.0 * 2.0 - 1.0); }
static uint64_t noise_prefix(uint64_t a, uint64_t b) { return mix(mix(a) ^ b); }

/* Initial value of element i of parameter `index`: 0.1 noise(7, index, i, 3),
 * prefix = noise_prefix(7, index). */
static float init_from(uint64_t prefix, size_t i) { return 0.1f * from_hash(mix(mix(prefix ^ i) ^ 3)); }

/* ---- value sources ------------------------------------------------------ */

typedef struct source_ctx {
    const zh_model *model;
    const zh_snapshot *from;
} source_ctx;

static plait_status source_read(void *ctx, int32_t index, const char *which, size_t off, size_t count, float *dst) {
    source_ctx *s = ctx;
    if (index < 0 || index >= s->model->n_params)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "source: no parameter %d", index);
    if (s->model->p[index].tied_to >= 0) index = s->model->p[index].tied_to;
    int w = -1;
    for (int k = 0; k < ZH_WHICH; k++)
        if (strcmp(which, which_name[k]) == 0) w = k;
    if (w < 0) return plait_set_error(PLAIT_ERR_INVALID_ARG, "source: unknown tensor %s", which);
    if (off + count > zh_numel(&s->model->p[index]))
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "source: %s[%zu..%zu) out of range", s->model->p[index].name,
                               off, off + count);
    if (w > 0 && (!s->from || !s->from->have_state))
        return plait_set_error(PLAIT_ERR_UNSUPPORTED, "source: no optimizer state");
    uint64_t prefix = noise_prefix(7, (uint64_t)index);
    for (size_t k = 0; k < count; k++) dst[k] = s->from ? s->from->t[w][index][off + k] : init_from(prefix, off + k);
    return PLAIT_OK;
}

/* ---- host --------------------------------------------------------------- */

static const plait_kernels test_kernels = {
    .struct_size = sizeof(plait_kernels),
    .zero = plait_k_zero,
    .copy = plait_k_copy,
    .scale = plait_k_scale,
    .axpy = plait_k_axpy,
    .sumsq = plait_k_sumsq,
    .adamw = plait_k_adamw,
    .sumsq_exact = plait_k_sumsq_exact,
    .sumsq_merge = plait_k_sumsq_merge,
    .sumsq_value = plait_k_sumsq_value,
};

/* The host the plugins under test are handed (their init argument): the
 * core's table with the vector kernels above. */
static plait_host g_test_host, g_device_host;

void zh_setup_host(void) {
    plait_host_install();
    g_test_host = *plait_host_table();
    g_test_host.kernels = &test_kernels;
    g_test_host.coll = plait_coll_api_table();
    g_device_host = g_test_host;
    oh_install(&g_device_host);
}

const plait_host *zh_host(void) { return &g_test_host; }
const plait_host *zh_device_host(void) { return &g_device_host; }

/* The bench plays the core: on the offset device it reads and writes its
 * storage (and the plugin's, in checks) through the host address. */
#define H(p) ((float *)oh_real(p))
static float *bench_alloc(const plait_host *h, size_t numel, const char *tag) {
    float *p = h->alloc(numel * sizeof(float), h->device_info ? h->device_info->mem_kind : PLAIT_MEM_HOST, 64, tag);
    if (p) memset(H(p), 0, numel * sizeof(float));
    return p;
}

/* ---- one rank ----------------------------------------------------------- */

typedef struct shared {
    zh_run *r;
    plait_threads_world *w;
    plait_config *cfg;
    const plait_optim_ops *ops;
    uint32_t flags; /* the plugin's for this configuration (flags_for, ABI 1.31) */
} shared;

typedef struct rank_ctx {
    shared *sh;
    zh_run *r;
    int rank;
    const plait_host *host;
    plait_comm *world;
    plait_param params[ZH_MAX_PARAMS];
    plait_layer layers[ZH_MAX_PARAMS];
    plait_param_set set;
    float *data_flat, *grad_flat, *scratch;
    size_t flat;
    plait_sum_tree *tree;
    void *opt;
    int64_t step;     /* step being run, relative to the run (0-based) */
    int in_eval;
} rank_ctx;

static int fail(rank_ctx *c, const char *fmt, ...) PLAIT_PRINTF(2, 3);
static int fail(rank_ctx *c, const char *fmt, ...) {
    char *e = c->r->err[c->rank];
    if (e[0]) return -1;
    int n = snprintf(e, 512, "rank %d step %lld: ", c->rank, (long long)c->step);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e + n, 512 - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

static int failst(rank_ctx *c, const char *what) { return fail(c, "%s: %s", what, plait_last_error()); }

static void build_params(rank_ctx *c) {
    const zh_model *m = c->r->model;
    size_t off = 0;
    for (int32_t i = 0; i < m->n_params; i++) {
        const zh_pspec *s = &m->p[i];
        plait_param *p = &c->params[i];
        memset(p, 0, sizeof *p);
        p->struct_size = sizeof *p;
        p->flags = s->flags;
        p->name = s->name;
        p->index = i;
        p->layer = s->layer;
        p->ndim = s->cols ? 2 : 1;
        p->shape[0] = s->rows;
        p->shape[1] = s->cols;
        p->tp_role = PLAIT_TP_REPLICATE;
        p->shard = (plait_shard){.dim = -1, .parts = 1, .index = 0, .groups = 1, .padded_len = s->rows};
        memcpy(p->local_shape, p->shape, sizeof p->shape);
        p->numel = zh_numel(s);
        p->tied_to = s->tied_to;
        p->flat_offset = off;
        off = (off + p->numel + 15) & ~(size_t)15;
    }
    c->flat = off;
    for (int32_t l = 0; l < m->n_layers; l++) {
        plait_layer *L = &c->layers[l];
        memset(L, 0, sizeof *L);
        L->struct_size = sizeof *L;
        L->name = "layer";
        L->index = l;
        L->first_param = -1;
        for (int32_t i = 0; i < m->n_params; i++)
            if (m->p[i].layer == l) {
                if (L->first_param < 0) L->first_param = i;
                L->n_params++;
            }
    }
    c->set = (plait_param_set){.struct_size = sizeof c->set, .n_params = m->n_params, .params = c->params,
                               .n_layers = m->n_layers, .layers = c->layers, .n_layers_total = m->n_layers};
    for (int32_t i = 0; i < m->n_params; i++) c->set.numel += c->params[i].numel;
}

static int alloc_core_storage(rank_ctx *c, source_ctx *src) {
    uint32_t flags = c->sh->flags;
    const zh_model *m = c->r->model;
    if (!(flags & PLAIT_OPTIM_OWNS_PARAMS)) {
        c->data_flat = bench_alloc(c->host, c->flat + 16, "bench parameters");
        c->set.data_flat = c->data_flat;
        for (int32_t i = 0; i < m->n_params; i++) c->params[i].data = c->data_flat + c->params[i].flat_offset;
        for (int32_t i = 0; i < m->n_params; i++) {
            if (m->p[i].tied_to >= 0) {
                c->params[i].data = c->params[m->p[i].tied_to].data;
                continue;
            }
            if (source_read(src, i, "param", 0, c->params[i].numel, H(c->params[i].data)) != PLAIT_OK)
                return failst(c, "initial values");
        }
    }
    if (!(flags & PLAIT_OPTIM_OWNS_GRADS)) {
        c->grad_flat = bench_alloc(c->host, c->flat + 16, "bench gradients");
        c->set.grad_flat = c->grad_flat;
        for (int32_t i = 0; i < m->n_params; i++) c->params[i].grad = c->grad_flat + c->params[i].flat_offset;
        if (c->r->det && c->r->m > 1) {
            if (plait_sum_tree_create(c->flat, PLAIT_F32, PLAIT_SUM, c->r->m, "deterministic accumulation", &c->tree) != PLAIT_OK) return failst(c, "grad tree");
            c->scratch = bench_alloc(c->host, c->flat + 16, "bench scratch");
        }
    }
    return 0;
}

/* The values parameter i must hold before run step s (after step s-1), or
 * NULL where they are its initial values (init_from of its original g:
 * i, or the parameter a tied copy i is of). */
static const float *expected_values(rank_ctx *c, int32_t g) {
    int64_t s = c->step - (c->in_eval ? 0 : 1);
    if (s >= 0) return c->r->expect[s].t[0][g];
    return c->r->from ? c->r->from->t[0][g] : NULL;
}

static int check_layer(rank_ctx *c, int32_t layer, int backward) {
    const zh_model *m = c->r->model;
    for (int32_t i = 0; i < m->n_params; i++) {
        if (m->p[i].layer != layer) continue;
        const plait_param *p = &c->params[i];
        if (!p->data) return fail(c, "%s of layer %d has no data during its %s", p->name, layer, backward ? "backward" : "forward");
        if (backward && !p->grad) return fail(c, "%s has no gradient storage during backward", p->name);
        /* Before the first step the values are known; later ones need `expect`. */
        if (!c->r->expect && c->step - (c->in_eval ? 0 : 1) >= 0) continue;
        int32_t g = m->p[i].tied_to >= 0 ? m->p[i].tied_to : i;
        const float *want_all = expected_values(c, g);
        uint64_t prefix = noise_prefix(7, (uint64_t)g);
        for (size_t k = 0; k < p->numel; k++) {
            float want = want_all ? want_all[k] : init_from(prefix, k), got = H(p->data)[k];
            int ok = c->r->expect_tol == 0 ? same_bits(want, got)
                                           : fabs((double)got - want) <= c->r->expect_tol * (fabs((double)want) + 1e-3);
            if (!ok)
                return fail(c, "%s[%zu] = %.9g during %s of layer %d, expected %.9g", p->name, k, (double)got,
                            backward ? "backward" : "forward", layer, (double)want);
        }
    }
    return 0;
}

/* The synthetic backward: grad += amp * noise(step, global mb, element) + 0.05 * value. */
static void fake_backward(rank_ctx *c, int32_t layer, int32_t mb) {
    const zh_model *m = c->r->model;
    uint64_t gmb = (uint64_t)c->rank * (uint64_t)c->r->m + (uint64_t)mb;
    uint64_t step = (uint64_t)(c->r->first_step + c->step);
    for (int32_t i = 0; i < m->n_params; i++) {
        if (m->p[i].layer != layer) continue;
        plait_param *p = &c->params[i];
        float *grad = H(p->grad), *data = H(p->data);
        uint64_t prefix = mix(noise_prefix(step, gmb) ^ (uint64_t)i);
        for (size_t k = 0; k < p->numel; k++) grad[k] += m->p[i].amp * from_hash(mix(prefix ^ k)) + 0.05f * data[k];
    }
}

static void redirect(rank_ctx *c, int32_t layer, int to_scratch) {
    for (int32_t i = 0; i < c->set.n_params; i++) {
        plait_param *p = &c->params[i];
        if (p->layer != layer) continue;
        if (to_scratch) {
            p->grad = c->scratch + p->flat_offset;
            memset(H(p->grad), 0, p->numel * sizeof(float));
        } else {
            p->grad = c->grad_flat + p->flat_offset;
        }
    }
}

/* The plugin's working buffers (every rank's: one tag) after one of its calls. */
static void note_buffers(rank_ctx *c) {
    char tag[96];
    snprintf(tag, sizeof tag, "%s buffers", c->r->plugin);
    uint64_t b = plait_mem_usage_of(tag);
    if (b > c->r->buffers_peak[c->rank]) c->r->buffers_peak[c->rank] = b;
}

static int call_hook(rank_ctx *c, int backward, int32_t layer, int32_t mb) {
    if (!c->r->on_hook || !c->r->on_hook(c->r->hook_ctx, c->rank, backward, layer, mb, c->opt)) return 0;
    return fail(c, "the test's hook failed during the %s of layer %d, micro-batch %d", backward ? "backward" : "forward",
                layer, mb);
}

static int forward(rank_ctx *c, int32_t mb) {
    const plait_optim_ops *o = c->sh->ops;
    for (int32_t l = 0; l < c->r->model->n_layers; l++) {
        if (o->before_forward && o->before_forward(c->opt, l, mb) != PLAIT_OK) return failst(c, "before_forward");
        note_buffers(c);
        if (check_layer(c, l, 0) || call_hook(c, 0, l, mb)) return -1;
        if (o->after_forward && o->after_forward(c->opt, l, mb) != PLAIT_OK) return failst(c, "after_forward");
        note_buffers(c);
    }
    return 0;
}

static int backward(rank_ctx *c, int32_t mb) {
    const plait_optim_ops *o = c->sh->ops;
    int last = mb == c->r->m - 1;
    for (int32_t l = c->r->model->n_layers - 1; l >= 0; l--) {
        if (o->before_backward && o->before_backward(c->opt, l, mb) != PLAIT_OK) return failst(c, "before_backward");
        note_buffers(c);
        if (c->tree) redirect(c, l, 1);
        if (check_layer(c, l, 1) || call_hook(c, 1, l, mb)) return -1;
        fake_backward(c, l, mb);
        if (c->tree) {
            redirect(c, l, 0);
            for (int32_t i = 0; i < c->set.n_params; i++) {
                plait_param *p = &c->params[i];
                if (p->layer == l && plait_sum_tree_add(c->tree, mb, H(c->scratch + p->flat_offset), H(c->grad_flat + p->flat_offset), p->flat_offset, p->numel, NULL) != PLAIT_OK)
                    return failst(c, "grad tree");
            }
        }
        if (o->after_backward && o->after_backward(c->opt, l, mb, last) != PLAIT_OK) return failst(c, "after_backward");
        note_buffers(c);
    }
    return 0;
}

/* The DP plugin's part for a plugin that does not reduce, and the core's tied sum. */
static int core_reduce(rank_ctx *c, uint64_t *bytes) {
    uint32_t flags = c->sh->flags;
    const plait_coll_api *coll = c->host->coll;
    if (flags & PLAIT_OPTIM_REDUCES_GRADS) return 0;
    if (c->r->n > 1) {
        plait_comm_stats a = {.struct_size = sizeof a}, b = {.struct_size = sizeof b};
        coll->stats(c->world, &a);
        plait_coll_opts o = {.struct_size = sizeof o, .algo = c->r->det ? PLAIT_ALGO_ORDERED : PLAIT_ALGO_AUTO,
                             .mem_kind = c->host->device_info ? c->host->device_info->mem_kind : PLAIT_MEM_HOST};
        if (coll->allreduce(c->world, c->grad_flat, c->grad_flat, c->flat, PLAIT_F32, PLAIT_SUM, &o, NULL) != PLAIT_OK)
            return failst(c, "DP all-reduce");
        coll->stats(c->world, &b);
        *bytes += b.bytes_sent - a.bytes_sent;
    }
    return 0;
}

static void core_combine_tied(rank_ctx *c) {
    if (c->sh->flags & PLAIT_OPTIM_REDUCES_GRADS) return;
    for (int32_t i = 0; i < c->set.n_params; i++) {
        plait_param *p = &c->params[i];
        if (!(p->flags & PLAIT_PARAM_TIED_COPY) || p->tied_to < 0) continue;
        float *dst = H(c->params[p->tied_to].grad);
        const float *src = H(p->grad);
        for (size_t k = 0; k < p->numel; k++) dst[k] = dst[k] + src[k];
    }
}

static int export_all(rank_ctx *c, zh_snapshot *dst, int states) {
    const zh_model *m = c->r->model;
    for (int w = 0; w < (states ? ZH_WHICH : 1); w++)
        for (int32_t i = 0; i < m->n_params; i++) {
            if (m->p[i].tied_to >= 0) continue;
            if (c->sh->ops->export_tensor(c->opt, i, which_name[w], c->rank == 0 ? dst->t[w][i] : NULL) != PLAIT_OK)
                return failst(c, "export_tensor");
        }
    if (states && c->rank == 0) {
        dst->optim_step = c->sh->ops->get_step ? c->sh->ops->get_step(c->opt) : 0;
        dst->have_state = 1;
    }
    return 0;
}

/* After each step: core-owned parameters equal rank 0's export everywhere. */
static int check_replicas(rank_ctx *c, const zh_snapshot *ref) {
    if (!c->data_flat) return 0;
    const zh_model *m = c->r->model;
    for (int32_t i = 0; i < m->n_params; i++) {
        int32_t g = m->p[i].tied_to >= 0 ? m->p[i].tied_to : i;
        if (memcmp(H(c->params[i].data), ref->t[0][g], c->params[i].numel * sizeof(float)) != 0)
            return fail(c, "parameter %s differs from DP rank 0's after the step", c->params[i].name);
    }
    return 0;
}

static int run_steps(rank_ctx *c) {
    zh_run *r = c->r;
    const plait_optim_ops *o = c->sh->ops;
    for (c->step = 0; c->step < r->steps; c->step++) {
        int64_t s = c->step;
        uint64_t bytes = 0;
        if (c->grad_flat) memset(H(c->grad_flat), 0, c->flat * sizeof(float));
        int m = r->m;
        switch (r->order) {
        case ZH_ORDER_GPIPE:
            for (int32_t mb = 0; mb < m; mb++)
                if (forward(c, mb)) return -1;
            for (int32_t mb = 0; mb < m; mb++)
                if (backward(c, mb)) return -1;
            break;
        case ZH_ORDER_1F1B:
            if (forward(c, 0)) return -1;
            for (int32_t mb = 0; mb < m; mb++) {
                if (mb + 1 < m && forward(c, mb + 1)) return -1;
                if (backward(c, mb)) return -1;
            }
            break;
        default:
            for (int32_t mb = 0; mb < m; mb++)
                if (forward(c, mb) || backward(c, mb)) return -1;
        }
        if (core_reduce(c, &bytes)) return -1;
        if (o->finish_grads && o->finish_grads(c->opt) != PLAIT_OK) return failst(c, "finish_grads");
        note_buffers(c);
        core_combine_tied(c);
        plait_optim_step_in in = {.struct_size = sizeof in, .step = r->first_step + s};
        plait_optim_step_out out = {.struct_size = sizeof out};
        double t0 = c->host->now();
        if (o->step(c->opt, &in, &out) != PLAIT_OK) return failst(c, "step");
        r->step_s[c->rank][s] = c->host->now() - t0;
        r->wait_s[c->rank][s] = out.wait_seconds;
        note_buffers(c);
        r->bytes[c->rank][s] = bytes + out.bytes_sent;
        if (c->rank == 0) {
            r->norm[s] = out.grad_norm;
            r->lr[s] = out.lr;
        }
        if (export_all(c, &r->traj[s], 0)) return -1;
        if (c->host->coll->barrier(c->world, NULL, NULL) != PLAIT_OK) return failst(c, "barrier");
        if (check_replicas(c, &r->traj[s])) return -1;
        c->in_eval = 1;
        for (int e = 0; e < r->eval_passes; e++)
            if (forward(c, 0)) return -1;
        c->in_eval = 0;
        if (c->host->coll->barrier(c->world, NULL, NULL) != PLAIT_OK) return failst(c, "barrier");
    }
    c->step = r->steps;
    return 0;
}

/* Allocator usage under the plugin's tags while every rank holds its storage. */
static int record_tags(rank_ctx *c, int end) {
    if (c->host->coll->barrier(c->world, NULL, NULL) != PLAIT_OK) return failst(c, "barrier");
    if (c->rank == 0) {
        char tag[96];
        const char *name = c->r->plugin;
        if (!end) {
            snprintf(tag, sizeof tag, "%s optimizer state", name);
            c->r->tag_state = plait_mem_usage_of(tag);
            snprintf(tag, sizeof tag, "%s gradient shards", name);
            c->r->tag_grad = plait_mem_usage_of(tag);
            snprintf(tag, sizeof tag, "%s parameter shards", name);
            c->r->tag_param = plait_mem_usage_of(tag);
        } else {
            snprintf(tag, sizeof tag, "%s buffers", name);
            c->r->tag_buffers = plait_mem_usage_of(tag);
        }
    }
    if (c->host->coll->barrier(c->world, NULL, NULL) != PLAIT_OK) return failst(c, "barrier");
    return 0;
}

static void rank_main(int rank, void *arg) {
    shared *sh = arg;
    zh_run *r = sh->r;
    rank_ctx c = {.sh = sh, .r = r, .rank = rank, .host = r->device ? zh_device_host() : zh_host()};
    plait_comm_settings set;
    plait_comm_settings_default(&set);
    set.timeout_s = 60;
    if (plait_threads_comm_world(sh->w, rank, &set, &c.world) != PLAIT_OK) {
        failst(&c, "world");
        return;
    }
    build_params(&c);
    source_ctx src = {.model = r->model, .from = r->from};
    plait_value_source vs = {.struct_size = sizeof vs, .ctx = &src, .read = source_read};
    if (alloc_core_storage(&c, &src)) goto out;
    plait_optim_init init = {.struct_size = sizeof init, .host = c.host, .config = sh->cfg, .params = &c.set,
                             .dp_comm = c.world, .world = c.world, .local_micro_batches = r->m,
                             .deterministic = r->det};
    if (sh->ops->create(&init, &c.opt) != PLAIT_OK) {
        failst(&c, "create");
        goto out;
    }
    if (sh->ops->materialize(c.opt, &vs) != PLAIT_OK) {
        failst(&c, "materialize");
        goto out;
    }
    if (r->from && sh->ops->set_step) sh->ops->set_step(c.opt, r->from->optim_step);
    r->mem0[rank].struct_size = sizeof r->mem0[rank];
    sh->ops->memory(c.opt, &r->mem0[rank]);
    if (record_tags(&c, 0)) goto out;
    if (run_steps(&c)) goto out;
    if (export_all(&c, &r->final, 1)) goto out;
    r->mem[rank].struct_size = sizeof r->mem[rank];
    sh->ops->memory(c.opt, &r->mem[rank]);
    if (record_tags(&c, 1)) goto out;
out:
    if (c.opt) sh->ops->destroy(c.opt);
    plait_sum_tree_free(c.tree);
    c.host->free(c.data_flat);
    c.host->free(c.grad_flat);
    c.host->free(c.scratch);
    plait_comm_free(c.world);
}

const char *zh_run_error(const zh_run *r) {
    for (int k = 0; k < ZH_MAX_RANKS; k++)
        if (r->err[k][0]) return r->err[k];
    return "";
}

int zh_run_exec(zh_run *r) {
    memset(r->err, 0, sizeof r->err);
    memset(r->buffers_peak, 0, sizeof r->buffers_peak);
    if (r->n > ZH_MAX_RANKS || r->steps > 64) {
        snprintf(r->err[0], sizeof r->err[0], "bench limits: %d ranks, %d steps", r->n, r->steps);
        return -1;
    }
    r->traj = calloc((size_t)(r->steps ? r->steps : 1), sizeof *r->traj);
    for (int s = 0; s < r->steps; s++) zh_snapshot_alloc(&r->traj[s], r->model);
    zh_snapshot_alloc(&r->final, r->model);
    const plait_plugin_desc *d = plait_plugin_load(PLAIT_KIND_OPTIM, r->plugin);
    if (!d) {
        snprintf(r->err[0], sizeof r->err[0], "load %s: %s", r->plugin, plait_last_error());
        return -1;
    }
    const plait_optim_ops *ops = d->ops;
    plait_config *cfg = plait_config_new();
    char section[64], ini[2048];
    snprintf(section, sizeof section, "optim.%s", d->name);
    snprintf(ini, sizeof ini,
             "[run]\nsteps = 1000\ndeterministic = %s\n"
             "[optim]\nplugin = %s\nlr = 1e-2\nmin_lr = 1e-3\nwarmup_steps = 2\nlr_decay_steps = 30\n"
             "beta1 = 0.9\nbeta2 = 0.95\neps = 1e-8\nweight_decay = 0.1\ngrad_clip = %.17g\n%s",
             r->det ? "true" : "false", r->plugin, r->grad_clip, r->extra_ini ? r->extra_ini : "");
    char *empty_env[] = {NULL};
    plait_status st = plait_config_declare_core(cfg);
    if (st == PLAIT_OK && d->n_keys)
        st = plait_config_declare(cfg, section, d->keys, d->n_keys, d->key_size, d->name);
    if (st == PLAIT_OK) st = plait_config_load_string(cfg, "zero-test.ini", ini);
    if (st == PLAIT_OK) st = plait_config_finalize(cfg, empty_env);
    if (st != PLAIT_OK) {
        snprintf(r->err[0], sizeof r->err[0], "config: %s", plait_last_error());
        plait_config_free(cfg);
        return -1;
    }
    /* the core's rule (core/train/run_setup.c): a key may make the plugin
     * keep the gradients */
    r->flags = PLAIT_OPTIM_HAS(ops, flags_for) ? ops->flags_for(zh_host(), cfg) : ops->flags;
    /* what the core asks before any rank starts (train/preflight.c) */
    r->check_err[0] = 0;
    if (PLAIT_OPTIM_HAS(ops, check)) {
        plait_optim_layout layout = {.struct_size = sizeof layout,
                                     .dp = r->n,
                                     .local_micro_batches = r->m,
                                     .deterministic = r->det};
        if (ops->check(zh_host(), cfg, &layout) != PLAIT_OK) {
            snprintf(r->check_err, sizeof r->check_err, "%s", plait_last_error());
            plait_clear_error();
        }
    }
    shared sh = {.r = r, .w = plait_threads_world_new(r->n, 60.0), .cfg = cfg, .ops = ops, .flags = r->flags};
    st = plait_threads_run(r->n, rank_main, &sh);
    plait_threads_world_free(sh.w);
    plait_config_free(cfg);
    if (st != PLAIT_OK) snprintf(r->err[0], sizeof r->err[0], "threads: %s", plait_last_error());
    for (int k = 0; r->check_err[0] && k < r->n; k++)
        if (!strstr(r->err[k], r->check_err)) {
            snprintf(r->err[k], sizeof r->err[k], "ops.check() refused (%.200s) but rank %d's create() %.200s",
                     r->check_err, k, r->err[k][0] ? r->err[k] : "accepted");
            break;
        }
    return zh_run_error(r)[0] ? -1 : 0;
}

void zh_run_free(zh_run *r) {
    for (int s = 0; r->traj && s < r->steps; s++) zh_snapshot_free(&r->traj[s]);
    free(r->traj);
    r->traj = NULL;
    zh_snapshot_free(&r->final);
}
