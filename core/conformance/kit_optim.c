/* The optim checks of `plait plugin test` (see kit_optim.h). */
#include "conformance/kit_optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <plait/optim_util.h>

#include "comm/comm.h"
#include "plugin/loader.h"
#include "runtime/process_state.h"


const char *const kit_optim_overrides[] = {
    "optim.lr=0.05",        "optim.min_lr=0.005",  "optim.warmup_steps=1", "optim.lr_decay_steps=4",
    "optim.lr_schedule=cosine", "optim.grad_clip=0.5", "optim.weight_decay=0.1", "optim.beta1=0.9",
    "optim.beta2=0.95",     "optim.eps=1e-8",      "run.steps=4",          NULL,
};

enum { N_PARAMS = 3, STEPS = 3 };
static const size_t kit_numel[N_PARAMS] = {10, 5, 4099};
static const char *const kit_names[N_PARAMS] = {"kit.w", "kit.b", "kit.big"};

/* A parameter set whose storage the kit owns (as the core does). */
typedef struct kit_params {
    plait_param params[N_PARAMS];
    plait_layer layers[N_PARAMS];
    plait_param_set set;
    float *data, *grad;
    size_t numel;
} kit_params;

/* Elements of the kit's parameters before parameter `i`. */
static size_t kp_numel_before(int i) {
    size_t n = 0;
    for (int k = 0; k < i; k++) n += kit_numel[k];
    return n;
}

static int params_init(kit_params *kp) {
    memset(kp, 0, sizeof *kp);
    for (int i = 0; i < N_PARAMS; i++) kp->numel += kit_numel[i];
    kp->data = calloc(kp->numel, sizeof(float));
    kp->grad = calloc(kp->numel, sizeof(float));
    if (!kp->data || !kp->grad) return -1;
    size_t off = 0;
    for (int i = 0; i < N_PARAMS; i++) {
        plait_param *p = &kp->params[i];
        *p = (plait_param){.struct_size = sizeof *p, .flags = i == 1 ? PLAIT_PARAM_NO_DECAY : 0u,
                           .name = kit_names[i], .index = i, .layer = i, .ndim = 1,
                           .shape = {(int64_t)kit_numel[i]}, .tp_role = PLAIT_TP_REPLICATE,
                           .shard = {.dim = -1, .parts = 1}, .local_shape = {(int64_t)kit_numel[i]},
                           .numel = kit_numel[i], .tied_to = -1, .data = kp->data + off,
                           .grad = kp->grad + off, .flat_offset = off};
        for (size_t j = 0; j < kit_numel[i]; j++) p->data[j] = (float)(0.02 * sin(0.1 * (double)(off + j) + 1.0));
        off += kit_numel[i];
    }
    /* each parameter is a layer of its own */
    static const char *const layer_names[N_PARAMS] = {"kit.0", "kit.1", "kit.2"};
    for (int i = 0; i < N_PARAMS; i++)
        kp->layers[i] = (plait_layer){.struct_size = sizeof(plait_layer), .name = layer_names[i], .index = i,
                                      .first_param = i, .n_params = 1};
    kp->set = (plait_param_set){.struct_size = sizeof kp->set, .n_params = N_PARAMS, .params = kp->params,
                                .n_layers = N_PARAMS, .layers = kp->layers, .n_layers_total = N_PARAMS,
                                .numel = kp->numel, .data_flat = kp->data, .grad_flat = kp->grad};
    return 0;
}

static void params_free(kit_params *kp) {
    free(kp->data);
    free(kp->grad);
}

/* Rank r's gradient of element j (global over the kit's parameters) at
 * step s: large enough that grad_clip 0.5 acts, different on every rank. */
static float grad_value(size_t j, int64_t s, int r) {
    return (float)(0.3 * sin(0.37 * (double)j + 1.3 * (double)s + 0.7 * (double)r));
}

/* The gradient the group's reduction gives (a sum: gradients arrive
 * prescaled, plait/parallel.h), in double. */
static double grad_sum(size_t j, int64_t s, int size) {
    double g = 0;
    for (int r = 0; r < size; r++) g += (double)grad_value(j, s, r);
    return g;
}

/* ---- the reference update ------------------------------------------------ */

typedef enum kit_math { KIT_MATH_NONE, KIT_MATH_ADAMW, KIT_MATH_SGD } kit_math;

static int names_are(const char *const *names, const char *a, const char *b) {
    if (!names || !names[0] || strcmp(names[0], a) != 0) return 0;
    if (!b) return names[1] == NULL;
    return names[1] && strcmp(names[1], b) == 0 && names[2] == NULL;
}

typedef struct kit_ref {
    kit_math math;
    plait_optim_hparams hp;
    double momentum;
    double *p, *m, *v;
    int64_t t;
} kit_ref;

/* One step of the reference in double, from the group's summed gradients. */
static void ref_step(kit_ref *r, const kit_params *kp, int64_t s, int size, double *lr_out, double *norm_out) {
    double sumsq = 0;
    for (size_t j = 0; j < kp->numel; j++) sumsq += grad_sum(j, s, size) * grad_sum(j, s, size);
    double norm = sqrt(sumsq), clip = plait_optim_clip_scale(r->hp.grad_clip, norm);
    double lr = plait_optim_lr_at(&r->hp, s);
    r->t++;
    double bc1 = 1.0 - pow(r->hp.beta1, (double)r->t), bc2 = 1.0 - pow(r->hp.beta2, (double)r->t);
    size_t off = 0;
    for (int i = 0; i < N_PARAMS; i++) {
        double wd = i == 1 ? 0.0 : r->hp.weight_decay;
        for (size_t j = off; j < off + kit_numel[i]; j++) {
            double g = grad_sum(j, s, size) * clip;
            r->p[j] *= 1.0 - lr * wd;
            if (r->math == KIT_MATH_ADAMW) {
                r->m[j] = r->hp.beta1 * r->m[j] + (1 - r->hp.beta1) * g;
                r->v[j] = r->hp.beta2 * r->v[j] + (1 - r->hp.beta2) * g * g;
                r->p[j] -= lr * (r->m[j] / bc1) / (sqrt(r->v[j] / bc2) + r->hp.eps);
            } else {
                r->m[j] = r->momentum * r->m[j] + g;
                r->p[j] -= lr * r->m[j];
            }
        }
        off += kit_numel[i];
    }
    *lr_out = lr;
    *norm_out = norm;
}

/* ---- driving the plugin -------------------------------------------------- */

typedef struct kit_optim {
    const plait_optim_ops *ops;
    void *state;
    kit_params kp;
    plait_comm *dp;   /* the data-parallel group, or NULL (one process) */
    int rank, size;
} kit_optim;

/* What every check needs: the plugin, its configuration, the host, the
 * group (NULL for one process). */
typedef struct kit_env {
    const plait_plugin_desc *d;
    const plait_config *cfg;
    const plait_host *host;
    plait_comm *dp;
} kit_env;

/* A value source over exported tensors (restore) or none (fresh). */
typedef struct kit_saved {
    int n_names;
    const char *const *names;
    float *tensors;  /* [1 + n_names][numel]: "param", then each state */
    size_t numel;
} kit_saved;

static plait_status saved_read(void *ctx, int32_t index, const char *which, size_t offset, size_t count,
                               float *dst) {
    const kit_saved *sv = ctx;
    if (!sv || index < 0 || index >= N_PARAMS) return PLAIT_ERR_UNSUPPORTED;
    size_t base = 0;
    for (int i = 0; i < index; i++) base += kit_numel[i];
    for (int k = 0; k <= sv->n_names; k++)
        if (strcmp(which, k ? sv->names[k - 1] : "param") == 0) {
            memcpy(dst, sv->tensors + (size_t)k * sv->numel + base + offset, count * sizeof(float));
            return PLAIT_OK;
        }
    return PLAIT_ERR_UNSUPPORTED;
}

static plait_status optim_open(const kit_env *e, const kit_saved *from, kit_optim *o) {
    o->ops = e->d->ops;
    o->state = NULL;
    o->dp = e->dp;
    o->rank = e->dp ? plait_comm_rank(e->dp) : 0;
    o->size = e->dp ? plait_comm_size(e->dp) : 1;
    if (params_init(&o->kp) != 0) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    if (from) memcpy(o->kp.data, from->tensors, o->kp.numel * sizeof(float));
    /* a plugin that owns storage sets data and grad itself; which it owns
     * follows its configuration where it says so (flags_for, ABI 1.31) */
    uint32_t flags = PLAIT_OPTIM_HAS(o->ops, flags_for) ? o->ops->flags_for(e->host, e->cfg) : o->ops->flags;
    for (int i = 0; i < N_PARAMS; i++) {
        if (flags & PLAIT_OPTIM_OWNS_PARAMS) o->kp.params[i].data = NULL;
        if (flags & PLAIT_OPTIM_OWNS_GRADS) o->kp.params[i].grad = NULL;
    }
    plait_optim_init init = {.struct_size = sizeof init, .host = e->host, .config = e->cfg,
                             .params = &o->kp.set, .dp_comm = e->dp, .world = e->dp, .local_micro_batches = 1};
    plait_plugin_call call;
    /* the refusals said before any rank starts (check, ABI 1.34) are
     * create()'s: the kit's configuration, which create() must take, is
     * no refusal of check's either */
    if (PLAIT_OPTIM_HAS(o->ops, check)) {
        plait_optim_layout layout = {.struct_size = sizeof layout, .dp = o->size, .local_micro_batches = 1};
        plait_plugin_call_enter(&call, PLAIT_KIND_OPTIM, o->ops, "check");
        plait_status cst = plait_plugin_call_leave(&call, o->ops->check(e->host, e->cfg, &layout));
        if (cst != PLAIT_OK)
            return plait_wrap_error(cst,
                                    "check() refused the kit's configuration on dp %d, one micro-batch a step, "
                                    "which create() must take (plait/optim.h)",
                                    o->size);
    }
    plait_plugin_call_enter(&call, PLAIT_KIND_OPTIM, o->ops, "create");
    plait_status st = plait_plugin_call_leave(&call, o->ops->create(&init, &o->state));
    /* a fresh start reads the kit's initial values (and no state) */
    kit_saved fresh = {.n_names = 0, .names = NULL, .tensors = o->kp.data, .numel = o->kp.numel};
    plait_value_source src = {.struct_size = sizeof src, .ctx = (void *)(from ? from : &fresh), .read = saved_read};
    if (st == PLAIT_OK) st = o->ops->materialize(o->state, &src);
    return st;
}

static void optim_close(kit_optim *o) {
    if (o->state) o->ops->destroy(o->state);
    params_free(&o->kp);
}

/* One training step as the core drives it: each parameter is its own layer
 * (0, 1, 2); the forward hooks in layer order, then per layer in reverse
 * the backward hooks around this rank's gradient (written where the
 * parameter's gradient lives once before_backward has run: the kit's flat
 * buffer, or the plugin's storage), then finish_grads and step. */
static plait_status optim_step(kit_optim *o, int64_t s, plait_optim_step_out *out) {
    const plait_optim_ops *ops = o->ops;
    plait_status st = PLAIT_OK;
    for (int32_t l = 0; st == PLAIT_OK && l < N_PARAMS; l++) {
        if (ops->before_forward) st = ops->before_forward(o->state, l, 0);
        if (st == PLAIT_OK && ops->after_forward) st = ops->after_forward(o->state, l, 0);
    }
    size_t off = kp_numel_before(N_PARAMS);
    for (int32_t l = N_PARAMS - 1; st == PLAIT_OK && l >= 0; l--) {
        off -= kit_numel[l];
        if (ops->before_backward) st = ops->before_backward(o->state, l, 0);
        float *g = o->kp.params[l].grad;
        if (st == PLAIT_OK && !g)
            st = plait_set_error(PLAIT_ERR_INVALID_ARG, "parameter %s has no gradient storage in the backward of its "
                                 "layer %d (after before_backward)", kit_names[l], (int)l);
        for (size_t j = 0; st == PLAIT_OK && j < kit_numel[l]; j++) g[j] = grad_value(off + j, s, o->rank);
        if (st == PLAIT_OK && ops->after_backward) st = ops->after_backward(o->state, l, 0, 1);
    }
    memset(out, 0, sizeof *out);
    out->struct_size = sizeof *out;
    plait_optim_step_in in = {.struct_size = sizeof in, .step = s};
    if (st == PLAIT_OK && ops->finish_grads) st = ops->finish_grads(o->state);
    return st == PLAIT_OK ? ops->step(o->state, &in, out) : st;
}

/* Export "param" and every state into sv->tensors (collective over the
 * group; the values are rank 0's, then broadcast so every rank can
 * restore from them). */
static plait_status optim_export(kit_optim *o, kit_saved *sv) {
    for (int k = 0; k <= sv->n_names; k++) {
        size_t off = 0;
        for (int i = 0; i < N_PARAMS; i++) {
            plait_status st = o->ops->export_tensor(o->state, i, k ? sv->names[k - 1] : "param",
                                                    sv->tensors + (size_t)k * sv->numel + off);
            if (st != PLAIT_OK) return st;
            off += kit_numel[i];
        }
    }
    if (o->dp)
        return plait_comm_broadcast(o->dp, sv->tensors, (size_t)(sv->n_names + 1) * sv->numel, PLAIT_F32, 0, NULL,
                                    NULL);
    return PLAIT_OK;
}

/* ---- the checks ------------------------------------------------------------ */

/* The current parameters, as export_tensor gives them (collective; every
 * rank gets rank 0's values). */
static plait_status export_params(kit_optim *o, float *out) {
    kit_saved sv = {.n_names = 0, .names = NULL, .tensors = out, .numel = o->kp.numel};
    return optim_export(o, &sv);
}

static void check_math(const kit_env *e, kit_report *rep) {
    const plait_optim_ops *ops = e->d->ops;
    kit_ref r = {0};
    r.math = names_are(ops->state_names, "exp_avg", "exp_avg_sq") ? KIT_MATH_ADAMW
             : names_are(ops->state_names, "momentum", NULL)         ? KIT_MATH_SGD
                                                                      : KIT_MATH_NONE;
    if (r.math == KIT_MATH_NONE) {
        kit_report_add(rep, "step-math", "optim-math", KIT_SKIP, "no reference for state names %s... (the kit knows "
                       "AdamW: exp_avg, exp_avg_sq; SGD: momentum)", ops->state_names && ops->state_names[0] ?
                       ops->state_names[0] : "(none)");
        return;
    }
    plait_optim_read_hparams(e->host, e->cfg, &r.hp);
    if (r.math == KIT_MATH_SGD) {
        char section[96];
        snprintf(section, sizeof section, "optim.%s", e->d->name);
        plait_value v;
        r.momentum = plait_config_get(e->cfg, section, "momentum", &v) == PLAIT_OK ? v.f : 0.0;
        plait_clear_error();
    }
    kit_optim o;
    plait_status st = optim_open(e, NULL, &o);
    r.p = calloc(o.kp.numel, sizeof(double));
    r.m = calloc(o.kp.numel, sizeof(double));
    r.v = calloc(o.kp.numel, sizeof(double));
    float *now = calloc(o.kp.numel, sizeof(float));
    if (st == PLAIT_OK && (!r.p || !r.m || !r.v || !now)) st = plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    for (size_t j = 0; st == PLAIT_OK && j < o.kp.numel; j++) r.p[j] = o.kp.data[j];
    char why[KIT_WHY_LEN] = "";
    for (int64_t s = 0; st == PLAIT_OK && s < STEPS && !why[0]; s++) {
        plait_optim_step_out out;
        st = optim_step(&o, s, &out);
        if (st == PLAIT_OK) st = export_params(&o, now);
        if (st != PLAIT_OK) break;
        double lr, norm;
        ref_step(&r, &o.kp, s, o.size, &lr, &norm);
        if (fabs(out.lr - lr) > 1e-12 * lr)
            snprintf(why, sizeof why, "step %lld: reported lr %.9g, the schedule gives %.9g", (long long)s, out.lr, lr);
        else if (fabs(out.grad_norm - norm) > 1e-6 * norm)
            snprintf(why, sizeof why, "step %lld: reported gradient norm %.9g, the %s gradients' is %.9g%s",
                     (long long)s, out.grad_norm, o.size > 1 ? "group's summed" : "", norm,
                     o.size > 1 ? " (the ranks' gradients differ: does the plugin sum them over the group?)" : "");
        for (size_t j = 0; !why[0] && j < o.kp.numel; j++)
            if (fabs((double)now[j] - r.p[j]) > 1e-6 + 1e-5 * fabs(r.p[j]))
                snprintf(why, sizeof why, "step %lld: element %zu is %.9g, the %s reference gives %.9g (lr %.4g, "
                         "clip scale %.4g, weight decay %.3g%s)", (long long)s, j, (double)now[j],
                         r.math == KIT_MATH_ADAMW ? "AdamW" : "SGD", r.p[j], lr,
                         plait_optim_clip_scale(r.hp.grad_clip, norm), j < kit_numel[0] ? r.hp.weight_decay : 0.0,
                         o.size > 1 ? ", gradients summed over the group" : "");
    }
    if (st != PLAIT_OK)
        kit_report_add(rep, "step-math", "optim-math", KIT_FAIL, "%s", plait_last_error());
    else if (why[0])
        kit_report_add(rep, "step-math", "optim-math", KIT_FAIL, "%s", why);
    else
        kit_report_add(rep, "step-math", "optim-math", KIT_PASS, "%d steps match %s (warmup, cosine, clipping, "
                       "weight decay%s)", STEPS, r.math == KIT_MATH_ADAMW ? "AdamW" : "SGD with momentum",
                       o.size > 1 ? "; gradients summed over the group" : "");
    free(now);
    free(r.p);
    free(r.m);
    free(r.v);
    optim_close(&o);
}

static int count_names(const char *const *names) {
    int n = 0;
    while (names && names[n]) n++;
    return n;
}

static void check_state(const kit_env *e, kit_report *rep) {
    const plait_optim_ops *ops = e->d->ops;
    kit_saved sv = {.n_names = count_names(ops->state_names), .names = ops->state_names};
    kit_optim a, b;
    memset(&b, 0, sizeof b);
    plait_status st = optim_open(e, NULL, &a);
    sv.numel = a.kp.numel;
    size_t all = (size_t)(sv.n_names + 1) * sv.numel;
    sv.tensors = calloc(all, sizeof(float));
    float *again = calloc(all, sizeof(float));
    if (st == PLAIT_OK && (!sv.tensors || !again)) st = plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    plait_optim_step_out out;
    for (int64_t s = 0; st == PLAIT_OK && s < 2; s++) st = optim_step(&a, s, &out);
    if (st == PLAIT_OK) st = optim_export(&a, &sv);
    int opened_b = 0;
    if (st == PLAIT_OK) {
        st = optim_open(e, &sv, &b);
        opened_b = 1;
    }
    if (st == PLAIT_OK && ops->get_step && ops->set_step) ops->set_step(b.state, ops->get_step(a.state));
    if (st == PLAIT_OK) st = optim_step(&a, 2, &out);
    if (st == PLAIT_OK) st = optim_step(&b, 2, &out);
    if (st == PLAIT_OK) st = optim_export(&a, &sv);
    kit_saved sb = sv;
    sb.tensors = again;
    if (st == PLAIT_OK) st = optim_export(&b, &sb);
    if (st != PLAIT_OK) {
        kit_report_add(rep, "state-restore", "optim-state", KIT_FAIL, "%s", plait_last_error());
    } else {
        size_t bad = all;
        for (size_t j = 0; j < all && bad == all; j++)
            if (memcmp(&sv.tensors[j], &again[j], sizeof(float)) != 0) bad = j;
        if (bad < all)
            kit_report_add(rep, "state-restore", "optim-state", KIT_FAIL, "after a save and restore at step 2, "
                           "step 3's %s differs at element %zu (%.9g, uninterrupted %.9g)",
                           bad / sv.numel ? sv.names[bad / sv.numel - 1] : "param", bad % sv.numel,
                           (double)again[bad], (double)sv.tensors[bad]);
        else
            kit_report_add(rep, "state-restore", "optim-state", KIT_PASS, "param and %d state tensor%s restored after "
                           "2 steps; step 3 bit-identical", sv.n_names, sv.n_names == 1 ? "" : "s");
    }
    if (opened_b) optim_close(&b);
    optim_close(&a);
    free(sv.tensors);
    free(again);
}

/* A tensor of `numel` elements held in full (4 B each) or as this rank's
 * equal shard of numel + padding over `size` ranks. */
static int holds(uint64_t bytes, uint64_t numel, uint64_t padding, int size) {
    return bytes == 4 * numel || (uint64_t)size * bytes == 4 * (numel + padding);
}

static void check_memory(const kit_env *e, kit_report *rep) {
    const plait_optim_ops *ops = e->d->ops;
    kit_optim o;
    plait_status st = optim_open(e, NULL, &o);
    if (st != PLAIT_OK) {
        kit_report_add(rep, "memory", "optim-memory", KIT_FAIL, "%s", plait_last_error());
        optim_close(&o);
        return;
    }
    plait_optim_memory m = {.struct_size = sizeof m};
    ops->memory(o.state, &m);
    uint64_t numel = o.kp.numel, bytes = numel * sizeof(float), states = (uint64_t)count_names(ops->state_names);
    uint64_t pad = o.size > 1 ? m.padding_elems : 0;
    /* one process holds everything; a group member its share: a state
     * tensor always as a shard of the group (ZeRO-1 on), parameters and
     * gradients whole or sharded as the plugin's flags say */
    int ok = states ? m.state_bytes % states == 0 && (o.size > 1 && (o.ops->flags & PLAIT_OPTIM_REDUCES_GRADS)
                                                          ? (uint64_t)o.size * (m.state_bytes / states) == 4 * (numel + pad)
                                                          : m.state_bytes == states * bytes)
                    : m.state_bytes == 0;
    ok = ok && holds(m.param_bytes, numel, pad, o.size) && holds(m.grad_bytes, numel, pad, o.size);
    ok = ok && (!(ops->flags & PLAIT_OPTIM_OWNS_PARAMS) || o.size == 1 || m.param_bytes < bytes);
    ok = ok && (!(ops->flags & PLAIT_OPTIM_OWNS_GRADS) || o.size == 1 || m.grad_bytes < bytes);
    if (!ok) {
        int sharded_state = o.size > 1 && (ops->flags & PLAIT_OPTIM_REDUCES_GRADS);
        uint64_t shard = o.size > 1 ? 4 * (numel + pad) / (uint64_t)o.size : bytes;
        char who[48] = "";
        if (o.size > 1) snprintf(who, sizeof who, " on rank %d of %d", o.rank, o.size);
        kit_report_add(rep, "memory", "optim-memory", KIT_FAIL, "memory()%s reports parameters %llu B, "
                       "gradients %llu B, state %llu B (padding %llu elements) for %llu elements: expected parameters "
                       "%llu B%s, gradients %llu B%s, state %llu x %llu B (%s)", who,
                       (unsigned long long)m.param_bytes, (unsigned long long)m.grad_bytes,
                       (unsigned long long)m.state_bytes, (unsigned long long)m.padding_elems,
                       (unsigned long long)numel, (unsigned long long)bytes,
                       ops->flags & PLAIT_OPTIM_OWNS_PARAMS && o.size > 1 ? " or this rank's equal shard" : "",
                       (unsigned long long)bytes,
                       ops->flags & PLAIT_OPTIM_OWNS_GRADS && o.size > 1 ? " or this rank's equal shard" : "",
                       (unsigned long long)states, (unsigned long long)(sharded_state ? shard : bytes),
                       sharded_state ? "this rank's equal shard of each state tensor" : "whole");
    }
    else
        kit_report_add(rep, "memory", "optim-memory", KIT_PASS, "parameters %llu B, gradients %llu B, state %llu B "
                       "(of %llu B each, %llu state tensor%s%s)", (unsigned long long)m.param_bytes,
                       (unsigned long long)m.grad_bytes, (unsigned long long)m.state_bytes, (unsigned long long)bytes,
                       (unsigned long long)states, states == 1 ? "" : "s", o.size > 1 ? ", this rank's share" : "");
    optim_close(&o);
}

int plait_kit_optim_needs_group(const plait_plugin_desc *desc) {
    const plait_optim_ops *ops = desc->ops;
    return (ops->flags & (PLAIT_OPTIM_OWNS_PARAMS | PLAIT_OPTIM_OWNS_GRADS | PLAIT_OPTIM_REDUCES_GRADS)) != 0;
}

void plait_kit_optim_run(const plait_plugin_desc *desc, const plait_config *cfg, const plait_host *host,
                         plait_comm *dp, kit_report *rep) {
    kit_env e = {.d = desc, .cfg = cfg, .host = host, .dp = dp};
    static const struct {
        const char *name;
        void (*run)(const kit_env *, kit_report *);
    } checks[] = {{"step-math", check_math}, {"state-restore", check_state}, {"memory", check_memory}};
    /* the process as the kit found it, compared after each check's calls
     * (plait/plugin.h: no call may change it); the first change is named */
    plait_process_state before;
    plait_process_state_take(&before);
    const char *changed_in = NULL;
    char what[KIT_WHY_LEN - 96] = "";
    for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++) {
        checks[i].run(&e, rep);
        if (!changed_in && plait_process_state_changed(&before, what, sizeof what)) changed_in = checks[i].name;
    }
    plait_process_state_free(&before);
    if (changed_in)
        kit_report_add(rep, "process", "process", KIT_FAIL, "the calls of the %s check changed the process: %s",
                       changed_in, what);
    else
        kit_report_add(rep, "process", "process", KIT_PASS,
                       "the working directory and the variables plait reads as found");
}
