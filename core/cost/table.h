/*
 * Printing `plait plan`: a header naming the cluster and the precision, one
 * row per layout kept (best predicted tokens/s first), the families of
 * layouts set aside and why, what the search weighed; and `--explain`'s
 * breakdown of one layout's step and memory. Writes to `out` only;
 * thread-safe for distinct streams.
 */
#ifndef PLAIT_CORE_COST_TABLE_H
#define PLAIT_CORE_COST_TABLE_H

#include <stdio.h>

#include "cost/layouts.h"
#include "cost/search.h"

/* The header (the cluster, the precision); `memory_for` (or NULL) is one
 * more line, which device the memory is counted for. */
void plait_cost_print_header(FILE *out, const char *config, int ranks, const plait_cluster *c, plait_precision p,
                             double mem_limit, const char *memory_for);
/* The columns' heading, rows of the valid layouts (results already
 * ranked; the layout column as wide as the longest name), then "does not
 * fit" for those over the limit; returns how many fit. */
size_t plait_cost_print_table(FILE *out, const plait_cost_result *r, size_t n);
/* "# skipped: FAMILY (N layouts): WHY", or "# does not fit: ..." for a
 * family none of whose layouts fits; returns the layouts they hold. */
size_t plait_cost_print_families(FILE *out, const plait_cost_family *f, size_t n);
/* What the search weighed, set aside and confirmed, and how long it took. */
void plait_cost_print_search(FILE *out, const plait_cost_search *s);

/* How the DP reduction of `t` meets the backward pass, as the step time
 * counts it, into buf (cap bytes; returned): the seconds behind it ("more
 * than it hides" where they exceed its window). */
const char *plait_cost_dp_overlap_text(char *buf, size_t cap, const plait_cost_time *t);

/* The breakdown of one layout's predicted step: compute per pipeline stage,
 * each communication by axis and link, the bubble, the optimizer, memory by
 * part. `stages` holds its l->pp stage costs, `r` its evaluation;
 * `memory_for` as for the header. */
void plait_cost_print_explain(FILE *out, const plait_cost_result *r, const plait_cost_rank *stages,
                              const plait_cost_ctx *x, const char *memory_for);

#endif
