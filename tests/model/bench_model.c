/*
 * Throughput of one training step of the core model on one process:
 * zero grads, forward and backward of every layer, tied-gradient sum,
 * AdamW. Not a test (timings are never asserted); run by hand:
 *
 *   build/tests/bench_model [small|large|all] [threads...] [--steps N]
 *
 * Prints ms/step (median), tokens/s, GFLOP/s with the nanoGPT/PaLM count
 * 6N + 12·L·C·T per token (N = parameters without wpe), MFU against the
 * 2-thread SGEMM peak of the shared baseline (172.8 GFLOP/s), the split of
 * the step, activation memory and peak RSS.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/kernels.h"
#include "model/model_harness.h"
#include "model/model_internal.h"
#include "runtime/memory.h"

#define PEAK_GFLOPS 172.8

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct bench_cfg {
    const char *name;
    int n_layer, n_head, n_embd, block, batch;
} bench_cfg;

static int run(const bench_cfg *c, int threads, int steps) {
    char ini[256];
    snprintf(ini, sizeof ini,
             "[run]\nseed = 1\n[model]\nn_layer = %d\nn_head = %d\nn_embd = %d\nblock_size = %d\n"
             "vocab_size = 256\n",
             c->n_layer, c->n_head, c->n_embd, c->block);
    plait_kernels_set_threads(threads);
    harness h;
    if (harness_init(&h, ini, c->batch, 1, 0, NULL) != 0) return 1;
    size_t n = (size_t)c->batch * (size_t)c->block;
    int32_t *tok = malloc((n + 1) * sizeof *tok);
    float *m1 = calloc(h.set.numel, sizeof(float)), *m2 = calloc(h.set.numel, sizeof(float));
    double *t_step = calloc((size_t)steps, sizeof(double));
    if (!tok || !m1 || !m2 || !t_step) return 1;
    plait_param *wte = harness_param(&h, "transformer.wte.weight");
    plait_param *head = harness_param(&h, "lm_head.weight");
    size_t n_nonpos = h.spec->total_numel - harness_param(&h, "transformer.wpe.weight")->numel;
    double flops_tok = 6.0 * (double)n_nonpos + 12.0 * c->n_layer * c->n_embd * c->block;
    plait_adamw_args args = {sizeof args, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0, 1.0f};
    double t_fwd = 0, t_bwd = 0, t_opt = 0;
    const int warmup = 2;
    for (int s = 0; s < warmup + steps; s++) {
        harness_tokens(tok, n + 1, 256, (uint32_t)s);
        double t0 = now();
        harness_zero_grads(&h);
        if (plait_model_set_batch(h.model, 0, tok, tok + 1) != PLAIT_OK) return 1;
        for (int32_t l = 0; l < h.spec->n_layers; l++)
            if (plait_model_forward_layer(h.model, l, 0) != PLAIT_OK) return 1;
        double t1 = now();
        for (int32_t l = h.spec->n_layers - 1; l >= 0; l--)
            if (plait_model_backward_layer(h.model, l, 0) != PLAIT_OK) return 1;
        double t2 = now();
        plait_k_axpy(wte->grad, head->grad, wte->numel, 1.0f);
        args.step = s + 1;
        for (int32_t i = 0; i < h.set.n_params; i++) {
            plait_param *p = &h.params[i];
            if (p->flags & PLAIT_PARAM_TIED_COPY) continue;
            args.weight_decay = (p->flags & PLAIT_PARAM_NO_DECAY) ? 0.0f : 0.1f;
            plait_k_adamw(p->data, p->grad, m1 + p->flat_offset, m2 + p->flat_offset, p->numel,
                          &args);
        }
        double t3 = now();
        if (s >= warmup) {
            t_step[s - warmup] = t3 - t0;
            t_fwd += t1 - t0;
            t_bwd += t2 - t1;
            t_opt += t3 - t2;
        }
        if (s == 0 || s == warmup + steps - 1)
            fprintf(stderr, "  step %d loss %.4f\n", s, plait_model_loss_sum(h.model, 0) / (double)n);
    }
    qsort(t_step, (size_t)steps, sizeof(double), cmp_double);
    double med = t_step[steps / 2];
    double tok_s = (double)n / med, gflops = flops_tok * tok_s / 1e9;
    double tot = t_fwd + t_bwd + t_opt;
    printf("%-6s threads=%d params=%zu N=%zu ms/step=%.1f (min %.1f) tokens/s=%.0f GFLOP/s=%.1f "
           "MFU=%.1f%% | fwd %.0f%% bwd %.0f%% adamw %.0f%% | activations %.1f MiB, peak RSS "
           "%.1f MiB\n",
           c->name, threads, h.spec->total_numel, n_nonpos, med * 1e3, t_step[0] * 1e3, tok_s,
           gflops, 100.0 * gflops / PEAK_GFLOPS, 100 * t_fwd / tot, 100 * t_bwd / tot,
           100 * t_opt / tot, (double)plait_model_activation_bytes(h.model) / 1048576.0,
           (double)plait_peak_rss() / 1048576.0);
    fflush(stdout);
    free(tok);
    free(m1);
    free(m2);
    free(t_step);
    harness_free(&h);
    return 0;
}

int main(int argc, char **argv) {
    static const bench_cfg cfgs[] = {{"small", 4, 4, 128, 128, 8}, {"large", 8, 8, 256, 256, 8}};
    const char *which = "all";
    int threads[8], n_threads = 0, steps = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc)
            steps = atoi(argv[++i]);
        else if (argv[i][0] >= '0' && argv[i][0] <= '9' && n_threads < 8)
            threads[n_threads++] = atoi(argv[i]);
        else
            which = argv[i];
    }
    if (n_threads == 0) threads[n_threads++] = 1, threads[n_threads++] = 2;
    for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++) {
        if (strcmp(which, "all") != 0 && strcmp(which, cfgs[c].name) != 0) continue;
        for (int t = 0; t < n_threads; t++) {
            int s = steps > 0 ? steps : (c == 0 ? 20 : 8);
            if (run(&cfgs[c], threads[t], s) != 0) {
                fprintf(stderr, "bench_model: %s failed\n", cfgs[c].name);
                return 1;
            }
        }
    }
    return 0;
}
