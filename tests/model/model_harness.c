#include "model/model_harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "kernels/kernels.h"
#include "runtime/error.h"
#include "runtime/memory.h"

static int fail(const char *what) {
    fprintf(stderr, "harness: %s: %s\n", what, plait_last_error());
    return -1;
}

int harness_init(harness *h, const char *ini, int32_t micro_batch, int32_t tp, int32_t tp_rank,
                 const plait_tp_ops *ops) {
    harness_opts o = {tp, tp_rank, ops, NULL, 0, 1};
    return harness_init_ex(h, ini, micro_batch, &o);
}

int harness_init_ex(harness *h, const char *ini, int32_t micro_batch, const harness_opts *o) {
    const int32_t tp = o->tp, tp_rank = o->tp_rank;
    const plait_tp_ops *ops = o->ops;
    memset(h, 0, sizeof *h);
    h->tp = tp;
    h->tp_rank = tp_rank;
    char *const no_env[] = {NULL};
    h->cfg = plait_config_new();
    if (!h->cfg || plait_config_declare_core(h->cfg) != PLAIT_OK ||
        plait_config_load_string(h->cfg, "test.ini", ini) != PLAIT_OK ||
        plait_config_finalize(h->cfg, no_env) != PLAIT_OK)
        return fail("config");
    if (plait_model_describe(h->cfg, micro_batch, &h->desc) != PLAIT_OK) return fail("describe");
    const plait_model_spec *sp = h->spec = plait_model_desc_spec(h->desc);
    h->B = micro_batch;
    h->T = sp->block_size;
    h->V = sp->vocab_size;
    h->C = sp->n_embd;
    int32_t np = sp->n_params, nl = sp->n_layers;
    h->shards = calloc((size_t)np, sizeof *h->shards);
    h->layer_stage = calloc((size_t)nl, sizeof *h->layer_stage);
    h->layer_chunk = calloc((size_t)nl, sizeof *h->layer_chunk);
    h->params = calloc((size_t)np, sizeof *h->params);
    if (!h->shards || !h->layer_stage || !h->layer_chunk || !h->params) return fail("alloc");
    int32_t vocab_padded = (sp->vocab_size + tp - 1) / tp * tp;
    for (int32_t l = 0; l < nl; l++) h->layer_stage[l] = o->layer_stage ? o->layer_stage[l] : 0;
    for (int32_t i = 0; i < np; i++) {
        plait_shard s = sp->params[i].shard;
        if (tp > 1 && sp->params[i].tp_role != PLAIT_TP_REPLICATE) {
            s.parts = tp;
            s.index = tp_rank;
            if (sp->params[i].tp_role == PLAIT_TP_VOCAB) s.padded_len = vocab_padded;
        }
        h->shards[i] = s;
    }
    h->plan.struct_size = sizeof h->plan;
    h->plan.n_params = np;
    h->plan.shards = h->shards;
    h->plan.n_layers = nl;
    h->plan.layer_stage = h->layer_stage;
    h->plan.layer_chunk = h->layer_chunk;
    h->plan.chunks = 1;
    h->plan.vocab_padded = vocab_padded;
    h->plan.micro_batches = 1;
    h->plan.tp_ops = ops;

    size_t total = 0;
    for (int32_t i = 0; i < np; i++) {
        plait_param *p = &h->params[i];
        *p = sp->params[i];
        if (plait_param_apply_shard(p, &h->shards[i]) != PLAIT_OK) return fail("shard");
        p->flat_offset = total;
        total += p->numel;
    }
    /* the open device's memory (host memory when none is open, or the
     * device keeps tensors in host memory); initial values go through a
     * host copy where the host cannot write it */
    h->on_device = plait_device_mem_kind() != PLAIT_MEM_HOST;
    h->data = plait_device_alloc(total * sizeof(float), "params");
    h->grad = plait_device_alloc(total * sizeof(float), "grads");
    if (!h->data || !h->grad) return fail("alloc");
    float *init = h->on_device ? malloc(total * sizeof(float)) : h->data;
    if (!init) return fail("alloc");
    const plait_init_rule rule = plait_model_init_rule(h->desc, (uint64_t)plait_config_int(h->cfg, "run", "seed"));
    for (int32_t i = 0; i < np; i++) {
        plait_param *p = &h->params[i];
        p->data = h->data + p->flat_offset;
        p->grad = h->grad + p->flat_offset;
        if (plait_model_init_values(&rule, p, 0, p->numel, init + p->flat_offset) != PLAIT_OK) return fail("init");
    }
    plait_status up = PLAIT_OK;
    if (h->on_device) {
        up = plait_device_copy(h->data, init, total * sizeof(float), PLAIT_COPY_TO_DEVICE);
        free(init);
    }
    if (up != PLAIT_OK) return fail("upload");
    for (int32_t i = 0; i < np; i++)
        if (h->params[i].flags & PLAIT_PARAM_TIED_COPY)
            h->params[i].data = h->params[h->params[i].tied_to].data;
    h->set.struct_size = sizeof h->set;
    h->set.n_params = np;
    h->set.params = h->params;
    h->set.n_layers = nl;
    h->set.layers = sp->layers;
    h->set.n_layers_total = nl;
    h->set.numel = total;
    h->set.data_flat = h->data;
    h->set.grad_flat = h->grad;
    harness_zero_grads(h);
    plait_model_create_args args = {.plan = &h->plan,
                                    .stage = o->stage,
                                    .params = &h->set,
                                    .max_slots = o->max_slots > 0 ? o->max_slots : 1,
                                    .split_backward = o->split_backward,
                                    .kernels = o->kernels,
                                    .activations_bf16 = o->activations_bf16,
                                    .params_gathered = o->params_gathered,
                                    .residual_bf16 = o->residual_bf16};
    if (plait_model_create(h->desc, &args, &h->model) != PLAIT_OK) return fail("create");
    return 0;
}

void harness_free(harness *h) {
    plait_model_free(h->model);
    plait_device_free(h->data);
    plait_device_free(h->grad);
    free(h->params);
    free(h->shards);
    free(h->layer_stage);
    free(h->layer_chunk);
    plait_model_desc_free(h->desc);
    plait_config_free(h->cfg);
    memset(h, 0, sizeof *h);
}

plait_param *harness_param(harness *h, const char *name) {
    for (int32_t i = 0; i < h->set.n_params; i++)
        if (strcmp(h->params[i].name, name) == 0) return &h->params[i];
    return NULL;
}

void harness_zero_grads(harness *h) {
    if (!h->on_device) {
        memset(h->grad, 0, h->set.numel * sizeof(float));
        return;
    }
    if (plait_device_ops_open()->fill_zero(h->grad, h->set.numel * sizeof(float)) != PLAIT_OK)
        fail("zero gradients");
}

plait_status harness_forward(harness *h, const int32_t *tokens, const int32_t *targets) {
    plait_model_keep_logits(h->model, 1); /* the callers read them */
    plait_status st = plait_model_set_batch(h->model, 0, tokens, targets);
    for (int32_t l = 0; st == PLAIT_OK && l < h->spec->n_layers; l++)
        st = plait_model_forward_layer(h->model, l, 0);
    return st;
}

plait_status harness_step(harness *h, const int32_t *tokens, const int32_t *targets) {
    plait_status st = plait_model_set_batch(h->model, 0, tokens, targets);
    plait_model_keep_logits(h->model, 0); /* as training runs: the fused loss */
    for (int32_t l = 0; st == PLAIT_OK && l < h->spec->n_layers; l++) st = plait_model_forward_layer(h->model, l, 0);
    for (int32_t l = h->spec->n_layers - 1; st == PLAIT_OK && l >= 0; l--)
        st = plait_model_backward_layer(h->model, l, 0);
    return st;
}

void harness_tokens(int32_t *dst, size_t n, int32_t V, uint32_t seed) {
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        dst[i] = (int32_t)((s >> 33) % (uint64_t)V);
    }
}

int harness_threads_agree(const char *ini, int threads) {
    harness h;
    if (harness_init(&h, ini, 4, 1, 0, NULL) != 0) return -1;
    const size_t n = (size_t)h.B * (size_t)h.T;
    int32_t *tok = malloc(n * sizeof *tok), *tgt = malloc(n * sizeof *tgt);
    float *g1 = malloc(h.set.numel * sizeof *g1);
    double loss[2] = {0, 0};
    plait_status st = tok && tgt && g1 ? PLAIT_OK : PLAIT_ERR_NO_MEMORY;
    if (st == PLAIT_OK) harness_tokens(tok, n, h.V, 3), harness_tokens(tgt, n, h.V, 4);
    for (int run = 0; st == PLAIT_OK && run < 2; run++) {
        plait_kernels_set_threads(run ? threads : 1);
        harness_zero_grads(&h);
        st = harness_step(&h, tok, tgt);
        loss[run] = plait_model_loss_sum(h.model, 0);
        if (run == 0) memcpy(g1, h.grad, h.set.numel * sizeof *g1);
    }
    plait_kernels_set_threads(1);
    int rc = 0;
    if (st != PLAIT_OK) {
        fprintf(stderr, "harness_threads_agree: %s\n", plait_last_error());
        rc = -1;
    } else if (loss[0] != loss[1] || memcmp(g1, h.grad, h.set.numel * sizeof *g1) != 0) {
        fprintf(stderr, "harness_threads_agree: 1 and %d threads differ: loss %.17g against %.17g%s\n", threads,
                loss[0], loss[1], loss[0] == loss[1] ? ", gradients differ" : "");
        rc = -1;
    }
    free(tok);
    free(tgt);
    free(g1);
    harness_free(&h);
    return rc;
}

int harness_trace_run(const char *ini, int32_t micro_batch, const harness_opts *o, harness_trace *t) {
    harness h;
    if (harness_init_ex(&h, ini, micro_batch, o) != 0) return -1;
    const size_t n = (size_t)h.B * (size_t)h.T;
    const int32_t slots = o->max_slots > 0 ? o->max_slots : 1, L = h.spec->n_layers;
    int32_t *tok = malloc(n * sizeof *tok), *tgt = malloc(n * sizeof *tgt);
    t->numel = h.set.numel;
    t->loss = malloc((size_t)t->steps * (size_t)slots * sizeof *t->loss);
    t->grads = malloc((size_t)t->steps * t->numel * sizeof(float));
    plait_status st = tok && tgt && t->loss && t->grads && !h.on_device ? PLAIT_OK : PLAIT_ERR_NO_MEMORY;
    for (int step = 0; st == PLAIT_OK && step < t->steps; step++) {
        harness_zero_grads(&h);
        for (int32_t s = 0; st == PLAIT_OK && s < slots; s++) {
            harness_tokens(tok, n, h.V, (uint32_t)(100 * step + 2 * s));
            harness_tokens(tgt, n, h.V, (uint32_t)(100 * step + 2 * s + 1));
            st = plait_model_set_batch(h.model, s, tok, tgt);
            for (int32_t l = 0; st == PLAIT_OK && l < L; l++) st = plait_model_forward_layer(h.model, l, s);
            t->loss[step * slots + s] = plait_model_loss_sum(h.model, s);
        }
        for (int32_t s = slots - 1; st == PLAIT_OK && s >= 0; s--)
            for (int32_t l = L - 1; st == PLAIT_OK && l >= 0; l--)
                st = o->split_backward ? plait_model_backward_input(h.model, l, s)
                                       : plait_model_backward_layer(h.model, l, s);
        for (int32_t s = slots - 1; o->split_backward && st == PLAIT_OK && s >= 0; s--)
            for (int32_t l = L - 1; st == PLAIT_OK && l >= 0; l--) st = plait_model_backward_weight(h.model, l, s);
        if (st != PLAIT_OK) break;
        memcpy(t->grads + (size_t)step * t->numel, h.grad, t->numel * sizeof(float));
        for (size_t i = 0; i < t->numel; i++) h.data[i] -= 0.05f * h.grad[i];
        if (!o->stale_weights) plait_model_weights_changed(h.model);
    }
    if (st != PLAIT_OK) fprintf(stderr, "harness_trace_run: %s\n", plait_last_error());
    t->act_bytes = plait_model_activation_bytes(h.model);
    t->host_bytes = plait_model_host_activation_bytes(h.model);
    t->copy_bytes = plait_model_weight_copy_bytes(h.model);
    t->bf16 = plait_model_bf16_activations(h.model);
    free(tok);
    free(tgt);
    harness_free(&h);
    return st == PLAIT_OK ? 0 : -1;
}

void harness_trace_free(harness_trace *t) {
    free(t->loss);
    free(t->grads);
    t->loss = NULL;
    t->grads = NULL;
}

const plait_kernels *harness_unfused_kernels(void) {
    static plait_kernels k;
    k = *plait_kernels_table();
    k.attention_fused_scratch = NULL;
    k.attention_fused_forward = NULL;
    k.attention_fused_backward = NULL;
    return &k;
}

double harness_loss_dev(const harness_trace *a, const harness_trace *b, int slots) {
    double worst = 0;
    for (int i = 0; i < a->steps * slots; i++) worst = fmax(worst, fabs(a->loss[i] - b->loss[i]) / fabs(b->loss[i]));
    return worst;
}

double harness_grad_dev(const harness_trace *a, const harness_trace *b) {
    double worst = 0;
    for (int s = 0; s < a->steps; s++) {
        double d = 0, n = 0;
        for (size_t i = 0; i < a->numel; i++) {
            const double x = a->grads[(size_t)s * a->numel + i], y = b->grads[(size_t)s * b->numel + i];
            d += (x - y) * (x - y);
            n += y * y;
        }
        worst = fmax(worst, sqrt(d / n));
    }
    return worst;
}

int harness_forward_only_agrees(harness *h) {
    const size_t n = (size_t)h->B * (size_t)h->T;
    int32_t *tok = malloc(n * sizeof *tok);
    if (!tok) return -1;
    harness_tokens(tok, n, h->V, 11);
    plait_model_keep_logits(h->model, 0);
    int rc = plait_model_set_batch(h->model, 0, tok, tok) == PLAIT_OK ? 0 : -1;
    plait_model_forward_only(h->model, 1);
    for (int32_t l = 0; rc == 0 && l < h->spec->n_layers; l++)
        if (plait_model_forward_layer(h->model, l, 0) != PLAIT_OK) rc = -1;
    const double eval = plait_model_loss_sum(h->model, 0);
    if (rc == 0 && (plait_model_backward_layer(h->model, h->spec->n_layers - 1, 0) != PLAIT_ERR_INVALID_ARG ||
                    !strstr(plait_last_error(), "forward-only"))) {
        printf("the head's backward after a forward-only forward was not refused as forward-only\n");
        rc = -1;
    }
    plait_model_forward_only(h->model, 0);
    if (rc == 0 && harness_step(h, tok, tok) != PLAIT_OK) rc = -1;
    const double train = plait_model_loss_sum(h->model, 0);
    printf("forward-only loss %.17g, training forward %.17g\n", eval, train);
    if (rc == 0 && !(isfinite(eval) && eval > 0 && memcmp(&eval, &train, sizeof eval) == 0)) rc = -1;
    free(tok);
    return rc;
}
