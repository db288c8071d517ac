/*
 * Layouts of N ranks: enumerating the candidates along chosen axes, and
 * evaluating one (is it valid, what will it cost) through the same checks
 * `plait train` runs before it starts (train/preflight.h).
 *
 * Which axes vary and over which values is a plait_cost_axes; an axis that
 * does not vary keeps the config's setting, except the micro-batch, which is
 * global_batch / dp without a pipeline and 1 with one (so m = global_batch /
 * dp micro-batches fill it, as Megatron-LM users set it).
 *
 * Not thread-safe (the loader callback and the preflight use the calling
 * thread's error slot). Nothing here allocates beyond the caller's arrays.
 */
#ifndef PLAIT_CORE_COST_LAYOUTS_H
#define PLAIT_CORE_COST_LAYOUTS_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "cost/cost.h"

#define PLAIT_COST_MAX_VALUES 16

typedef struct plait_cost_layout {
    int dp, tp, pp;
    char schedule[16];   /* gpipe, 1f1b, interleaved; "" without a pipeline */
    int chunks;          /* model chunks per stage (interleaved's virtual stages), 1 otherwise */
    char optim[16];      /* adam, zero1, zero2, zero3 */
    int64_t micro_batch; /* sequences per micro-batch */
    int bucket_mb;       /* DP / ZeRO bucket size in MB (0 = the plugin's default) */
    char comm[32];       /* comm plugin */
} plait_cost_layout;

/* Axis names, in the order of --axes. */
enum { PLAIT_AXIS_N_DP, PLAIT_AXIS_N_TP, PLAIT_AXIS_N_PP, PLAIT_AXIS_N_SCHEDULE, PLAIT_AXIS_N_CHUNKS,
       PLAIT_AXIS_N_OPTIM, PLAIT_AXIS_N_MICRO_BATCH, PLAIT_AXIS_N_BUCKET_MB, PLAIT_AXIS_N_COMM, PLAIT_AXIS_N_COUNT };
extern const char *const plait_cost_axis_names[PLAIT_AXIS_N_COUNT];

typedef struct plait_cost_axes {
    int ranks;
    unsigned vary;                  /* bit per axis (1u << PLAIT_AXIS_N_*) */
    /* Explicit values per axis (bounds); n = 0 = every sensible value. For
     * text axes (schedule, optim, comm) `text` holds them. */
    int n[PLAIT_AXIS_N_COUNT];
    int64_t num[PLAIT_AXIS_N_COUNT][PLAIT_COST_MAX_VALUES];
    char text[PLAIT_AXIS_N_COUNT][PLAIT_COST_MAX_VALUES][32];
    /* The config's own settings, for the axes that do not vary. */
    int64_t global_batch;
    plait_cost_layout base;
} plait_cost_axes;

/* Parse "dp,tp,pp,schedule" into axes->vary; "AXIS=v1,v2" style bounds are
 * set with plait_cost_axes_values. Errors name the unknown axis and list
 * the known ones. */
plait_status plait_cost_axes_parse(plait_cost_axes *axes, const char *list);
/* Values of one axis ("1,2,4" or "gpipe,1f1b"); also makes the axis vary. */
plait_status plait_cost_axes_values(plait_cost_axes *axes, const char *axis, const char *values);

/* Every candidate layout in a fixed order (dp, tp, pp, then the other axes
 * in axis order). Writes at most `cap`; returns the count there would be. */
size_t plait_cost_enumerate(const plait_cost_axes *axes, plait_cost_layout *out, size_t cap);

/* "dp 2 x tp 1 x pp 2, 1f1b, mb 1, adam" (and the bucket, chunks and comm
 * when set). */
void plait_cost_layout_name(const plait_cost_layout *l, char *buf, size_t len);
/* The `section.key=value` overrides that turn the config into the layout,
 * one per entry of out (each up to 96 bytes). Returns the count (<= 12). */
int plait_cost_layout_overrides(const plait_cost_layout *l, int64_t global_batch, char out[][96]);

/* Builds the finalized config for a layout from the overrides (the CLI's
 * loader: the file, the user's overrides, then these). */
typedef plait_status (*plait_cost_loader)(void *ctx, int n_overrides, char *const *overrides,
                                          plait_config **out);

typedef struct plait_cost_result {
    plait_cost_layout layout;
    int valid;                 /* 0: why says why */
    int fits;                  /* predicted memory within the limit */
    char why[512];
    plait_cost_mem mem;        /* the rank needing the most */
    plait_cost_time time;
    double tokens_per_step;
    double tokens_per_s;
    double flops_per_step;     /* all ranks */
} plait_cost_result;

/* Check and predict one layout: the loader's config, the preflight of
 * every rank, then the cost model on cluster `c` with the world of
 * axes->ranks. A layout the checks refuse is valid = 0 with their message;
 * memory over `mem_limit` bytes per rank (0 = the cluster's) sets fits = 0
 * and says so in why. Returns PLAIT_OK unless memory runs out. */
plait_status plait_cost_evaluate(const plait_cost_layout *l, int64_t global_batch, plait_cost_loader load,
                                 void *ctx, const plait_cluster *c, double mem_limit, plait_cost_result *out);

/* The predicted memory of each rank of the layout `cfg` (finalized, as for
 * plait_layout_preflight) describes, in world order: up to `cap` rows, the
 * count in *n. Errors are the preflight's. */
plait_status plait_cost_config_memory(plait_config *cfg, const plait_cluster *c, plait_cost_mem *per_rank, int cap,
                                      int *n);

/* Memory limit per rank on cluster `c` for a job of `ranks`. */
double plait_cost_mem_limit(const plait_cluster *c, int ranks);

/* Sort valid, fitting results first, by predicted tokens/s, best first
 * (equal ones in a fixed order). */
void plait_cost_sort_results(plait_cost_result *r, size_t n);

#endif
