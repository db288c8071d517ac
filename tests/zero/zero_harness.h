/*
 * A test bench for Adam-family optimizer plugins (adam, zero1/2/3) without
 * the trainer: N data-parallel ranks run as threads of this process over the
 * core's in-process transport, each with a parameter set shaped like a small
 * GPT (embedding with a tied head copy, blocks, head) and a synthetic
 * "model" whose gradients are a fixed function of (step, global micro-batch,
 * element) plus a multiple of the parameter value, so a parameter the
 * optimizer failed to gather shows up in the gradients.
 *
 * The bench plays the core's part exactly as core/train/run_step.c does:
 * it owns parameter/gradient storage unless the plugin's flags say
 * otherwise (flat buffers, 16-float aligned tensors, the tied copy sharing
 * the original's values), calls the layer hooks in a chosen micro-batch order,
 * accumulates micro-batches in the canonical tree in deterministic mode
 * (core/coll/sum_tree.h) when it owns gradients, all-reduces gradients over
 * DP (ordered in deterministic mode) when the plugin does not reduce them,
 * and sums the tied copy's gradient into the original's when the plugin does
 * not. Global micro-batch of rank r, local micro-batch j: r*M + j (the DP
 * plugin's rule), so any (N, M) with equal N*M sees the same data.
 *
 * Checks made during a run (failures recorded in zh_run.err):
 *   - every parameter of a layer has data (and in backward, gradient storage)
 *     during its hooks, equal to the expected values (`expect`, if given);
 *   - core-owned parameters are identical on every rank after each step.
 */
#ifndef PLAIT_TESTS_ZERO_HARNESS_H
#define PLAIT_TESTS_ZERO_HARNESS_H

#include <stddef.h>
#include <stdint.h>

#include <plait/plait.h>

#define ZH_MAX_PARAMS 48
#define ZH_MAX_RANKS 8
#define ZH_WHICH 3 /* param, exp_avg, exp_avg_sq */

typedef struct zh_pspec {
    const char *name;
    int32_t layer;
    int64_t rows, cols;   /* cols = 0: a vector */
    uint32_t flags;       /* PLAIT_PARAM_* */
    int32_t tied_to;      /* -1 or the original's index */
    float amp;            /* gradient magnitude */
} zh_pspec;

typedef struct zh_model {
    int32_t n_params, n_layers;
    zh_pspec p[ZH_MAX_PARAMS];
} zh_model;

/* A small GPT-like model: embedding (wte, wpe), `blocks` blocks of LayerNorm +
 * two linear layers, head (LayerNorm + lm_head tied to wte). `c` channels,
 * `v` vocabulary, `t` positions. */
void zh_model_gpt(zh_model *m, int blocks, int64_t c, int64_t v, int64_t t);
/* Σ elements of parameters that are not tied copies. */
size_t zh_model_psi(const zh_model *m);
size_t zh_numel(const zh_pspec *p);

/* Full tensors of every parameter (tied copies skipped) for param and the
 * two moments, plus the optimizer's step count. */
typedef struct zh_snapshot {
    float *t[ZH_WHICH][ZH_MAX_PARAMS];
    int64_t optim_step;
    int have_state;
} zh_snapshot;
void zh_snapshot_alloc(zh_snapshot *s, const zh_model *m);
void zh_snapshot_free(zh_snapshot *s);
/* Bitwise equality of what both hold (params, and states when both have them);
 * 0 and a description in why[] if they differ. */
int zh_snapshot_equal(const zh_model *m, const zh_snapshot *a, const zh_snapshot *b, int states, char *why,
                      size_t len);
/* max |a-b| / (|b| + atol) over parameters. */
double zh_snapshot_maxrel(const zh_model *m, const zh_snapshot *a, const zh_snapshot *b, double atol);

enum { ZH_ORDER_FB = 0, ZH_ORDER_GPIPE = 1, ZH_ORDER_1F1B = 2 };

typedef struct zh_run {
    /* inputs */
    const char *plugin;         /* "adam", "zero1", ... */
    const zh_model *model;
    int n, m;                   /* DP ranks, local micro-batches */
    int det;
    int steps;
    int64_t first_step;         /* step index of the first step (schedule) */
    double grad_clip;           /* [optim] grad_clip */
    const char *extra_ini;      /* more INI text (plugin sections), or NULL */
    int order;                  /* ZH_ORDER_* */
    int eval_passes;            /* forward-only passes after each step */
    const zh_snapshot *from;    /* initial values (and state) or NULL: fresh */
    const zh_snapshot *expect;  /* expected params before each step [steps] or NULL */
    double expect_tol;          /* 0: bitwise */
    /* 1: the plugin gets the offset host (tests/support/offset_host.h): a
     * device whose memory faults on any host access; the bench's own
     * parameter and gradient storage is that device's memory too, as the
     * core's is on a GPU. */
    int device;
    /* Called on every rank (its own thread) while a layer runs: after
     * before_forward / before_backward and the data check, before the
     * after_ hook. `opt_state` is the plugin's state, for white-box tests;
     * a non-zero return fails the run (describe why in the hook's context).
     * NULL: none. */
    int (*on_hook)(void *ctx, int rank, int backward, int32_t layer, int32_t mb, void *opt_state);
    void *hook_ctx;
    /* outputs (allocated by zh_run_exec, freed by zh_run_free) */
    zh_snapshot *traj;          /* params after each step [steps] */
    zh_snapshot final;          /* params and states after the last step */
    double norm[64], lr[64];    /* per step (rank 0) */
    uint64_t bytes[ZH_MAX_RANKS][64];
    /* per rank and step: plait_optim_step_out.wait_seconds, and the wall
     * time of the step() call that reported it */
    double wait_s[ZH_MAX_RANKS][64], step_s[ZH_MAX_RANKS][64];
    plait_optim_memory mem[ZH_MAX_RANKS];      /* after the last step */
    plait_optim_memory mem0[ZH_MAX_RANKS];     /* after materialize */
    uint32_t flags;             /* the plugin's */
    /* host allocator bytes (all ranks) under the plugin's tags "<plugin>
     * optimizer state", "... gradient shards", "... parameter shards" after
     * materialize, and "... buffers" at the end of the run */
    uint64_t tag_state, tag_grad, tag_param, tag_buffers;
    /* the most "... buffers" held (all ranks together) right after any of
     * the plugin's hook, finish_grads or step calls, as each rank saw it */
    uint64_t buffers_peak[ZH_MAX_RANKS];
    /* ops.check's refusal of the run's config and layout before any rank
     * ran ("" where it accepted, or the plugin has none). Where it
     * refused, every rank's create() must refuse in the same words:
     * zh_run_exec fails the run saying so otherwise. */
    char check_err[512];
    char err[ZH_MAX_RANKS][512];
} zh_run;

/* Install the core's host table for plugin loading and build the test host
 * (the core's table with the harness's vector kernels) once per process. */
void zh_setup_host(void);
/* The test host handed to plugins through their init arguments (device:
 * the offset host over it). */
const plait_host *zh_host(void);
const plait_host *zh_device_host(void);
/* Run; returns 0 if every rank succeeded, else -1 with messages in err[]. */
int zh_run_exec(zh_run *r);
void zh_run_free(zh_run *r);
/* First error message of the run ("" if none). */
const char *zh_run_error(const zh_run *r);

#endif
