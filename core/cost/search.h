/*
 * Weighing a space of layouts: every layout the axes span is checked
 * against the rules that need no plan (batch arithmetic, whole attention
 * heads per tensor-parallel rank, a layer per pipeline chunk, tensor
 * parallelism inside a node) and costed from the model's shape
 * (stages.h) in microseconds; the best are then confirmed through the plan
 * their parallel plugin makes (plait_cost_evaluate), which also gives the
 * figures shown. What the rules set aside is reported by family (the
 * layouts sharing dp x tp x pp, or a schedule too), once, with the reason.
 *
 * Not thread-safe (the loader and the preflight use the calling thread's
 * error slot).
 */
#ifndef PLAIT_CORE_COST_SEARCH_H
#define PLAIT_CORE_COST_SEARCH_H

#include <stddef.h>

#include "cost/layouts.h"

/* Layouts the search set aside together, and why. */
typedef struct plait_cost_family {
    char name[96];       /* "dp3 tp1 pp1", "dp1 tp1 pp3 interleaved v2", or one layout's name */
    char why[512];
    size_t layouts;      /* how many of the space's layouts it holds */
    int over_memory;     /* valid, but none of its layouts fits the memory limit */
} plait_cost_family;

typedef struct plait_cost_search {
    plait_cost_result *results;   /* the layouts kept, confirmed by their plugin's plan, ranked best first */
    size_t n;
    plait_cost_family *families;  /* set aside: by the rules, by the plugin, or none fits */
    size_t n_families;
    size_t candidates;            /* layouts in the space */
    size_t refused;               /* of those, set aside by the rules */
    size_t weighed;               /* costed from the model's shape */
    size_t fitting;               /* of those, within the memory limit */
    size_t confirmed;             /* plans asked of the plugin */
    size_t shape_only;            /* of the results, ranked by the model's shape alone (PLAIT_COST_SHOW_ALL) */
    size_t over_in_plan;          /* of those, over the memory limit by the plan's own count (not shown) */
    double seconds;               /* the whole search */
} plait_cost_search;

/* Weigh every layout of `axes` for the model of `cfg` (the config as given,
 * finalized) in context `x`. Keeps the `show` best fitting layouts
 * confirmed by the plugin (those the plugin refuses become families and
 * the next ones are tried); show = 0 keeps every valid layout, fitting or
 * not, each confirmed (what `bench sweep` measures). Returns PLAIT_OK, the
 * model's own error, or PLAIT_ERR_NO_MEMORY. Free with
 * plait_cost_search_free. */
plait_status plait_cost_search_run(const plait_cost_axes *axes, plait_config *cfg, const plait_cost_ctx *x,
                                   size_t show, plait_cost_search *out);

/* show = PLAIT_COST_SHOW_ALL (`plait plan --top all`): every fitting
 * layout, the best PLAIT_COST_CONFIRM of them confirmed by the plugin as
 * above and the others ranked by their figures from the model's shape
 * (confirmed = 0: a plugin's plan per layout costs milliseconds, and
 * thousands of them seconds; `--explain` confirms any one). */
#define PLAIT_COST_SHOW_ALL ((size_t)-1 / 2)
#define PLAIT_COST_CONFIRM 20
void plait_cost_search_free(plait_cost_search *s);

#endif
